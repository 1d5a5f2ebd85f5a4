"""An operator's `terraform apply` must not delete VMs that run jobs. hashicorp/google replaces (destroys, then
creates) a regional MIG when one of its ForceNew arguments changes, and destroying a MIG deletes its VMs with the
jobs on them. The MIG's ForceNew arguments that do not follow from its for_each key (name and region do: another
key is another MIG) are therefore ignored after creation: a changed `cluster_settings` zone list would otherwise
replace every MIG of that region while its jobs run."""

from __future__ import annotations

import re

import pytest

from tests.terraform.hcl import ROOT, TERRAFORM, Module, block

# The arguments of google_compute_region_instance_group_manager with ForceNew in hashicorp/google 5.40 to 6.x
# (resource_compute_region_instance_group_manager.go); distribution_policy_target_shape is updated in place.
FORCE_NEW = ("name", "region", "project", "base_instance_name", "distribution_policy_zones")
# What follows from the for_each key (cluster/region[/model]): a change there is another MIG, not this one replaced.
IDENTITY = {"name": "${each.value.mig_name}", "region": "${each.value.region}"}


@pytest.fixture(scope="module")
def mig() -> dict:
    return Module.load().resources_of("google_compute_region_instance_group_manager")["zen"]


def test_no_input_change_replaces_a_mig(mig):
    ignored = set(block(mig["lifecycle"])["ignore_changes"])
    assert {name: mig[name] for name in IDENTITY} == IDENTITY
    replacing = [name for name in FORCE_NEW if name in mig and name not in IDENTITY and name not in ignored]
    assert replacing == [], f"an apply changing these replaces the MIG, deleting its VMs and their jobs: {replacing}"
    # The zones are still given when a MIG is made (a region added, a MIG replaced on purpose).
    assert mig["distribution_policy_zones"] == "${length(each.value.zones) > 0 ? each.value.zones : null}"


def test_the_zones_are_documented_as_fixed_with_the_way_to_change_them():
    page = (ROOT / "docs" / "how-to" / "operate.md").read_text()
    section = page.split("## Changing a cluster", 1)[1]
    assert "keeps an existing MIG's zones" in " ".join(section.split())
    replace = re.search(r"-replace='google_compute_region_instance_group_manager\.zen\[\"CLUSTER/REGION\"\]'", section)
    assert replace, "the page says how to replace a MIG to give it new zones"
    description = (TERRAFORM / "variables.tf").read_text().split('variable "cluster_settings"', 1)[1].split("EOT", 2)[1]
    assert "reach a MIG only when it is replaced" in " ".join(description.split())
