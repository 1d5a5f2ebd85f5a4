"""The cluster list is kept once, in the Zen configuration (issue 36: it was kept twice, in the tfvars and
the YAML): terraform reads it (terraform/clusters.tf), so the MIGs it makes and the clusters the
functions scale cannot disagree. Evaluated by terraform itself (``terraform console``) over clusters.tf's
locals and the declared variables, for the default configuration and one of a user's."""

from __future__ import annotations

import json
import re
import shutil
import textwrap

import pytest
import yaml

from tests.terraform.hcl import TERRAFORM, console, top_block
from zen.core.config import ZenConfig, load_config

pytestmark = pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")

OWN_CONFIG = textwrap.dedent("""
    project: my-team
    clusters:
      - {name: 2xh100, gpu_type: nvidia-h100-80gb, gpu_count: 2, machine_type: a3-highgpu-2g,
         regions: [us-east5, europe-west4], max_vms_per_region: 3, max_vms: 5, provisioning: [spot, standard]}
      - {name: 1xl4, gpu_type: nvidia-l4, gpu_count: 1, machine_type: g2-standard-8, regions: [us-east4],
         max_vms_per_region: 2, max_vms: 2, min_vms: 1}
    """)
FIELDS = ("name", "gpu_type", "gpu_count", "machine_type", "regions", "max_vms_per_region", "max_vms", "min_vms")


def evaluate(tmp_path, config_text: str, tfvars: str, query: str):
    (tmp_path / "zen.yaml").write_text(config_text)
    variables = TERRAFORM / "variables.tf"
    (tmp_path / "main.tf").write_text("\n".join([
        top_block(variables, 'variable "clusters" {'), top_block(variables, 'variable "cluster_settings" {'),
        top_block(variables, 'variable "spot" {'),
        'locals {\n  zen_config = yamldecode(file("${path.module}/zen.yaml"))\n}\n',
        top_block(TERRAFORM / "clusters.tf", "locals {")]))
    (tmp_path / "test.tfvars").write_text(tfvars)
    result = console(tmp_path, f"jsonencode({query})", "test.tfvars")
    assert result.returncode == 0, result.stderr
    return json.loads(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("config_text", [(TERRAFORM.parent / "shared/zen/core/default_config.yaml").read_text(),
                                         OWN_CONFIG], ids=["default", "own"])
def test_terraform_makes_the_clusters_of_the_configuration(tmp_path, config_text):
    config = ZenConfig.model_validate(yaml.safe_load(config_text))
    first = config.clusters[0]
    settings = 'cluster_settings = { "%s" = { zones = { "%s" = ["%s-b"] }, boot_disk_size_gb = 500 } }' % (
        first.name, first.regions[0], first.regions[0])
    clusters, models, match = evaluate(tmp_path, config_text, settings,
                                       "[local.clusters, local.cluster_provisioning, local.clusters_match]")
    assert [{f: c[f] for f in FIELDS} for c in clusters] == [
        {f: getattr(c, f) for f in FIELDS} for c in config.clusters]
    assert clusters[0]["zones"] == {first.regions[0]: [f"{first.regions[0]}-b"]}
    assert clusters[0]["boot_disk_size_gb"] == 500 and clusters[-1]["boot_disk_size_gb"] == 200
    for cluster in config.clusters:  # the models Zen reads (a cluster that lists none: [standard])
        assert models[cluster.name] == list(cluster.provisioning)
    assert match is True


@pytest.mark.parametrize("config_text", [(TERRAFORM.parent / "shared/zen/core/default_config.yaml").read_text(),
                                         OWN_CONFIG], ids=["default", "own"])
def test_terraform_builds_the_models_zen_prices_and_refuses_a_spot_bool_that_says_otherwise(tmp_path, config_text):
    """The deprecated `spot` bool defaulted to true and made every cluster that lists no provisioning spot,
    while Zen (ClusterConfig.provisioning's default, [standard]) priced its VMs at the standard price,
    placed `provisioning: standard` jobs on them and refused `provisioning: spot` ones. Terraform now builds
    the configuration's models; a spot bool that says otherwise names the clusters in a failed plan."""
    config = ZenConfig.model_validate(yaml.safe_load(config_text))
    unlisted = [c.name for c in config.clusters if "provisioning" not in c.model_fields_set]
    for tfvars, conflicts in (("", []), ("spot = false", []), ("spot = true", unlisted)):
        models, found = evaluate(tmp_path, config_text, tfvars, "[local.cluster_provisioning, local.provisioning_conflicts]")
        assert models == {c.name: list(c.provisioning) for c in config.clusters}
        assert [entry.split(" ")[0] for entry in found] == conflicts, tfvars
    assert unlisted  # both configurations have a cluster that lists none
    entry = evaluate(tmp_path, config_text, "spot = true", "local.provisioning_conflicts")[0]
    assert entry == f'{unlisted[0]} (["spot"] against the configuration\'s ["standard"])'


def test_a_deprecated_clusters_variable_must_agree_with_the_configuration(tmp_path):
    config = load_config()
    listed = [{f: getattr(c, f) for f in FIELDS} for c in config.clusters]
    same = "clusters = " + json.dumps(listed)
    assert evaluate(tmp_path, (TERRAFORM.parent / "shared/zen/core/default_config.yaml").read_text(), same,
                    "local.clusters_match") is True
    said = [{**c, "provisioning": ["spot"]} for c in listed]  # the deprecated list's own models: the same rule
    assert evaluate(tmp_path, (TERRAFORM.parent / "shared/zen/core/default_config.yaml").read_text(),
                    "clusters = " + json.dumps(said), "local.provisioning_conflicts") == [
        f'{c["name"]} (["spot"] against the configuration\'s ["standard"])' for c in listed]
    listed[0]["max_vms"] += 1
    differs = "clusters = " + json.dumps(listed)
    assert evaluate(tmp_path, (TERRAFORM.parent / "shared/zen/core/default_config.yaml").read_text(), differs,
                    "local.clusters_match") is False


def test_settings_for_a_cluster_the_configuration_lacks_are_named(tmp_path):
    unknown = evaluate(tmp_path, OWN_CONFIG, 'cluster_settings = { "8xa100" = { zones = {} } }',
                       "local.unknown_cluster_settings")
    assert unknown == ["8xa100"]


def test_zones_for_a_region_the_cluster_lacks_or_of_another_region_are_named(tmp_path):
    """A region's zones given under a region the cluster does not run in (``us-east-4`` for us-east4) were dropped
    unread, the MIG spanning every zone of the region, those without the GPU too; a zone of another region, or one
    listed twice, was left for GCE to refuse in the middle of an apply. The plan names each (a precondition)."""
    settings = ('cluster_settings = { "1xl4" = { zones = { "us-east-4" = ["us-east4-a"] } },'
                ' "2xh100" = { zones = { "us-east5" = ["us-east5-a", "us-central1-b", "us-east5-a"],'
                ' "europe-west4" = ["europe-west4-b"] } } }')
    assert evaluate(tmp_path, OWN_CONFIG, settings, "local.zone_problems") == [
        "2xh100: zone us-central1-b is not in region us-east5", "2xh100: a zone of us-east5 is listed twice",
        "1xl4: zones of us-east-4, which is not one of its regions (us-east4)"]
    good = 'cluster_settings = { "2xh100" = { zones = { "us-east5" = ["us-east5-a", "us-east5-b"] } } }'
    assert evaluate(tmp_path, OWN_CONFIG, good, "local.zone_problems") == []
    example = (TERRAFORM / "terraform.tfvars.example").read_text()  # its zones, for the default configuration's
    assert evaluate(tmp_path, (TERRAFORM.parent / "shared/zen/core/default_config.yaml").read_text(),
                    example[example.index("cluster_settings = {"):example.index("\n}\n", example.index(
                        "cluster_settings = {")) + 3], "local.zone_problems") == []
    from tests.terraform.hcl import Module, block

    preconditions = block(Module.load().resources_of("google_compute_region_instance_group_manager")["zen"][
        "lifecycle"])["precondition"]
    assert any("zone_problems" in p["condition"] for p in preconditions)


def test_the_default_configuration_path_exists():
    """main.tf pointed at shared/zen/default_config.yaml, which does not exist (it moved to zen/core)."""
    main = (TERRAFORM / "main.tf").read_text()
    path = re.search(r'"\$\{path\.module\}/\.\./(shared/zen/[^"]+default_config\.yaml)"', main).group(1)
    assert (TERRAFORM.parent / path).is_file()


def test_the_longest_mig_name_the_configuration_accepts_names_what_terraform_makes_after_it():
    """A MIG name of 54-58 characters passed the configuration, then `terraform plan` failed: the instance
    template's name_prefix "<MIG>-" (the provider allows 54 characters) and a compact cluster's policy
    "<MIG>-compact" (Compute names: 63). The configuration's limit leaves room for both."""
    import re

    import pytest

    from tests.terraform.hcl import Module
    from zen.core.cluster_config import ClusterConfig

    module = Module.load()
    suffix = {kind: re.fullmatch(r"\$\{each\.value\.mig_name\}(.*)", module.resources_of(kind)[name][field]).group(1)
              for kind, name, field in (("google_compute_instance_template", "zen", "name_prefix"),
                                        ("google_compute_resource_policy", "compact", "name"))}
    fields = dict(gpu_type="nvidia-h100-80gb", gpu_count=8, machine_type="a3-highgpu-8g", max_vms_per_region=1,
                  max_vms=1, provisioning=["standard", "spot"], compact=True)
    longest = ClusterConfig(name="8xh100-80gb-research", regions=["northamerica-northeast1"], **fields)
    mig = longest.mig_name("northamerica-northeast1", "spot")
    assert len(mig + suffix["google_compute_instance_template"]) <= 54
    assert len(mig + suffix["google_compute_resource_policy"]) <= 63
    with pytest.raises(ValueError, match="is over 53 characters"):
        ClusterConfig(name="8xh100-80gb-researchx", regions=["northamerica-northeast1"], **fields)
    from zen_dev.sim.scenario import ClusterSpec  # a scenario's cluster deploys nothing: GCE's 58 still holds there

    assert ClusterSpec(name="8xh100-80gb-researchx", regions=["northamerica-northeast1"], **fields).name
