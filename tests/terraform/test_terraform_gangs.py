"""Terraform for multi-node jobs (zen.core.gang): one firewall rule per cluster lets its VMs, and only
them, reach each other (source and target: the cluster's agent service accounts), for the rendezvous at
MASTER_PORT (the configuration's gangs.port range) and the collectives' connections after it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap

import pytest

from tests.terraform.hcl import TERRAFORM, Module, block
from tests.terraform.test_terraform_start_subscriptions import main_local_list


def test_a_gangs_nodes_reach_each_other_and_nothing_else_reaches_them():
    module = Module.load()
    rule = module.resources_of("google_compute_firewall")["gang_rendezvous"]
    assert rule["for_each"] == "${local.cluster_agent_accounts}"
    assert rule["direction"] == "INGRESS"
    assert rule["source_service_accounts"] == rule["target_service_accounts"] == "${each.value}"
    assert "source_ranges" not in rule and "source_tags" not in rule  # no address range: identities only
    assert block(rule["allow"])["protocol"] == "tcp"
    accounts = module.locals["cluster_agent_accounts"]
    assert "local.agent_account_keys" in accounts and "google_service_account.agent[key].email" in accounts
    assert "local.zen_config.gangs.port" in module.locals["gang_port"]


def test_a_compact_cluster_gets_a_compact_placement_policy_and_single_zone_migs():
    """``compact: true`` (zen.core.cluster_config): per pool a resource policy with collocation COLLOCATED,
    named in the pool's instance template, and the MIG's target shape ANY_SINGLE_ZONE; other clusters get
    neither (the policy's for_each keeps the compact pools only)."""
    module = Module.load()
    policy = module.resources_of("google_compute_resource_policy")["compact"]
    assert "if target.placement_policy" in policy["for_each"] and "local.mig_targets" in policy["for_each"]
    assert block(policy["group_placement_policy"])["collocation"] == "COLLOCATED"
    assert policy["region"] == "${each.value.region}"
    template = module.resources_of("google_compute_instance_template")["zen"]
    assert template["resource_policies"] == (
        "${each.value.placement_policy ? [google_compute_resource_policy.compact[each.key].self_link] : null}")
    mig = module.resources_of("google_compute_region_instance_group_manager")["zen"]
    assert "each.value.compact" in mig["distribution_policy_target_shape"]
    assert "try(c.compact, false)" in module.locals["config_compact"]


def test_a_compact_pool_of_a_type_gce_places_with_a_workload_policy_gets_its_one_zone_and_no_placement_policy():
    """GCE places a MIG of A3 High (8 GPUs), A3 Mega, A3 Ultra or A4 VMs close together with a workload policy on the
    MIG, not the compact placement policy in its template that other compact pools get; the google provider
    versions.tf pins (< 7.0) attaches no workload policy to a regional MIG. Those pools get the one zone alone:
    terraform's pattern is the configuration's (zen.core.cluster_config.WORKLOAD_POLICY_TYPES), and the MIG's shape
    still follows ``compact``. Raising the pin is the time to give them a workload policy."""
    import re

    from zen.core.cluster_config import WORKLOAD_POLICY_TYPES

    module = Module.load()
    google = module.files["versions.tf"]["terraform"][0]["required_providers"][0]["google"]
    assert float(re.search(r"< ?([\d.]+)", google["version"]).group(1)) <= 7.0
    assert module.locals["workload_policy_types"] == WORKLOAD_POLICY_TYPES.pattern
    targets = module.locals["mig_targets"]
    assert "regexall(local.workload_policy_types, cluster.machine_type)" in targets
    assert "placement_policy" in targets
    assert [t for t in ("a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g")
            if not WORKLOAD_POLICY_TYPES.match(t)] == []
    assert [t for t in ("a2-highgpu-8g", "a3-highgpu-4g", "a3-edgegpu-8g", "g2-standard-48", "g4-standard-48")
            if WORKLOAD_POLICY_TYPES.match(t)] == []


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_terraform_gives_the_placement_policy_to_the_compact_pools_of_the_other_types_alone(tmp_path):
    """Evaluated by terraform itself over main.tf's own ``mig_targets`` and ``workload_policy_types`` (the other
    locals they read given here): an A2 compact pool gets the policy, an A3 High (8 GPUs) compact pool and a pool
    not compact do not."""
    main = (TERRAFORM / "main.tf").read_text()
    types = next(line for line in main.splitlines() if line.startswith("  workload_policy_types = "))
    (tmp_path / "main.tf").write_text(textwrap.dedent("""
        variable "default_image" { default = "image" }
        variable "subnetworks" { default = {} }
        locals {
          clusters = [for c in [["8xa100", "a2-highgpu-8g"], ["8xh100", "a3-highgpu-8g"], ["spread", "a2-highgpu-8g"]] : {
            name = c[0], regions = ["us-central1"], machine_type = c[1], gpu_type = "g", gpu_count = 8, image = null,
            boot_disk_size_gb = 200, zones = {} }]
          cluster_provisioning = { "8xa100" = ["spot"], "8xh100" = ["spot"], "spread" = ["spot"] }
          mig_suffix = { spot = "spot", standard = "std", "flex-start" = "flex" }
          config_flex_start_run_s = {}
          config_compact = { "8xa100" = true, "8xh100" = true, "spread" = false }
          cluster_region_tags = { for c in ["8xa100", "8xh100", "spread"] : c => { "us-central1" = [] } }
          config_pull_limits = {}
          config_jobs_per_vm = {}
        %s
        %s
        }
        """) % (types, main_local_list("mig_targets", main)))
    env = {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1"}
    result = subprocess.run(["terraform", "console"], input="jsonencode({ for key, t in local.mig_targets : "
                            "key => [t.compact, t.placement_policy] })\n", cwd=tmp_path, capture_output=True,
                            text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(json.loads(result.stdout.strip().splitlines()[-1])) == {
        "8xa100/us-central1": [True, True], "8xh100/us-central1": [True, False], "spread/us-central1": [False, False]}
