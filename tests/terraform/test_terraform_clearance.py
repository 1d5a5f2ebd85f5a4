"""Terraform for data clearance: a bucket holding a prefix of the configuration's data_clearance is granted
only to the agent accounts whose tags clear it; other buckets to every account. A cluster's regions with
different tags (region_tags) run as different accounts, so a cluster cleared in some regions only is granted
there only.

The locals of terraform/main.tf and iam.tf are evaluated for real with ``terraform console`` (no providers
needed: only locals and variables) when the terraform binary is on the PATH, and compared with the regions whose
VMs Zen's placement lets read the data (``ClusterConfig.tags_of``, ``zen.core.clearance``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap

import pytest
import yaml

from tests.terraform.hcl import TERRAFORM, Module, main_local
from zen.core.config import ZenConfig

CONFIG = """
clusters:
  - {name: 4xa100-40gb, gpu_type: nvidia-tesla-a100, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-central1, us-west1],
     max_vms_per_region: 1, max_vms: 2, region_tags: {us-central1: [hipaa]}}
  - {name: 8xa100-40gb, gpu_type: nvidia-tesla-a100, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [us-central1],
     max_vms_per_region: 1, max_vms: 1, tags: [hipaa, eu]}
  - {name: 1xl4, gpu_type: nvidia-l4, gpu_count: 1, machine_type: g2-standard-8, regions: [us-east4], max_vms_per_region: 1, max_vms: 1}
  - {name: 8xh100-80gb-europe-and-america, gpu_type: nvidia-h100-80gb, gpu_count: 8, machine_type: a3-highgpu-8g,
     regions: [us-east4, europe-west4, us-central1], max_vms_per_region: 1, max_vms: 3, tags: [hipaa],
     region_tags: {europe-west4: [eu], us-central1: [eu]}}
data_clearance:
  - {prefix: "gs://genomics-private", tags: [hipaa]}
  - {prefix: "gs://mixed/eu-patients/", tags: [hipaa, eu]}
  - {prefix: "gs://mixed/us-patients/", tags: [hipaa]}
"""
BUCKETS = ["genomics-private", "mixed", "public-data"]


def _locals_block(first: str) -> str:
    """The ``locals { ... }`` block of iam.tf whose first local is ``first``."""
    iam = (TERRAFORM / "iam.tf").read_text()
    match = re.search(r"\nlocals \{\n  %s = .*?\n\}\n" % first, iam, re.S)
    assert match, f"no locals block starting with {first} in iam.tf"
    return match.group(0)


def test_agent_bucket_bindings_follow_the_clearance():
    module = Module.load()
    for name in ("agent_input_bindings", "agent_output_bindings"):
        assert "local.cleared_accounts" in module.locals[name], f"{name} ignores data_clearance"
    assert module.locals["clearance_bindings"].startswith("${[for b in try(local.zen_config.data_clearance, [])")


def _render(tmp_path, query: str) -> list:
    """``query`` over main.tf's tags and iam.tf's agent accounts and bucket bindings, for CONFIG."""
    config = yaml.safe_load(CONFIG)
    clusters = [{"name": c["name"], "regions": c["regions"]} for c in config["clusters"]]
    (tmp_path / "zen.yaml").write_text(CONFIG)
    (tmp_path / "main.tf").write_text(textwrap.dedent("""
        variable "name_prefix" { default = "zen" }
        locals { clusters = %s }
        variable "agent_input_buckets" { default = %s }
        variable "agent_output_buckets" { default = ["mixed"] }
        variable "agent_image_repositories" { default = [] }
        variable "agent_secrets" { default = {"4xa100-40gb": ["hf-token"], "8xa100-40gb": ["wandb-key"]} }
        locals {
          zen_config = yamldecode(file("${path.module}/zen.yaml"))
        %s
        %s
        }
        """) % (json.dumps(clusters), json.dumps(BUCKETS), main_local("config_tags"), main_local("cluster_region_tags"))
        + _locals_block("agent_clusters") + _locals_block("clearance_bindings") + _locals_block("agent_input_bindings")
        + _locals_block("agent_secret_bindings"))
    result = subprocess.run(["terraform", "console"], input=f"jsonencode({query})\n", cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_a_clusters_regions_with_different_tags_run_as_different_accounts(tmp_path):
    accounts, account_of = _render(tmp_path, "[local.agent_accounts, local.agent_account_of]")

    config = ZenConfig.model_validate(yaml.safe_load(CONFIG))
    for cluster in config.clusters:
        for region in cluster.regions:  # each region's VMs run as an account of their cluster and tags
            account = accounts[account_of[cluster.name][region]]
            assert (account["cluster"], account["tags"]) == (cluster.name, sorted(cluster.tags_of(region)))
        tag_sets = {tuple(cluster.tags_of(r)) for r in cluster.regions}
        assert len(set(account_of[cluster.name].values())) == len(tag_sets)  # equal tags share one
    assert set(account_of["4xa100-40gb"].values()) == {"4xa100-40gb", account_of["4xa100-40gb"]["us-central1"]}
    assert account_of["4xa100-40gb"]["us-west1"] == "4xa100-40gb"  # the untagged region keeps the cluster's account
    assert account_of["4xa100-40gb"]["us-central1"].startswith("4xa100-40gb/")  # hipaa: an account of its own
    long = account_of["8xh100-80gb-europe-and-america"]
    assert long["europe-west4"] == long["us-central1"] != long["us-east4"] == "8xh100-80gb-europe-and-america"
    # a cluster with one tag set keeps the one account it always had, under its name
    assert account_of["8xa100-40gb"] == {"us-central1": "8xa100-40gb"} and account_of["1xl4"] == {"us-east4": "1xl4"}
    ids = [a["account_id"] for a in accounts.values()]
    assert len(set(ids)) == len(ids) == 6
    assert all(re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", i) for i in ids), ids
    assert accounts["8xa100-40gb"]["account_id"] == "zen-ag-8xa100-40gb"
    assert accounts["4xa100-40gb"]["account_id"] == "zen-ag-4xa100-40gb"


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_a_bound_bucket_is_granted_only_to_the_cleared_accounts(tmp_path):
    account_of, inputs, outputs = _render(
        tmp_path, "[local.agent_account_of, local.agent_input_bindings, local.agent_output_bindings]")

    def members(bindings: dict) -> dict[str, list[str]]:
        by_bucket: dict[str, list[str]] = {}
        for binding in bindings.values():
            by_bucket.setdefault(binding["bucket"], []).append(binding["account"])
        return {bucket: sorted(accounts) for bucket, accounts in by_bucket.items()}

    granted = members(inputs)
    # the accounts of the regions Zen's placement lets read each bucket's bound data: regions carrying all
    # of every binding's tags
    config = ZenConfig.model_validate(yaml.safe_load(CONFIG))
    cleared = {bucket: sorted({account_of[c.name][r] for c in config.clusters for r in c.regions if all(
        set(b.tags) <= set(c.tags_of(r)) for b in config.data_clearance if b.bucket == bucket)}) for bucket in BUCKETS}
    assert granted == cleared
    hipaa_4x = account_of["4xa100-40gb"]["us-central1"]
    hipaa_eu_8xh = account_of["8xh100-80gb-europe-and-america"]["europe-west4"]
    assert granted["genomics-private"] == sorted(  # hipaa: the cluster-wide tag, or one region's account only
        [hipaa_4x, "8xa100-40gb", "8xh100-80gb-europe-and-america", hipaa_eu_8xh])
    assert "4xa100-40gb" not in granted["genomics-private"]  # its untagged region's VMs get nothing
    assert granted["mixed"] == sorted(["8xa100-40gb", hipaa_eu_8xh])  # both prefixes' tags: cleared-only bucket
    assert granted["public-data"] == sorted(set(  # unbound: every account, as before
        a for regions in account_of.values() for a in regions.values()))
    assert members(outputs) == {"mixed": sorted(["8xa100-40gb", hipaa_eu_8xh])}


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_each_of_a_clusters_accounts_reads_its_clusters_secrets(tmp_path):
    account_of, secrets = _render(tmp_path, "[local.agent_account_of, local.agent_secret_bindings]")

    granted = sorted((b["account"], b["secret"]) for b in secrets.values())
    assert granted == sorted([(account_of["4xa100-40gb"]["us-central1"], "hf-token"), ("4xa100-40gb", "hf-token"),
                              ("8xa100-40gb", "wandb-key")])
    assert "4xa100-40gb/hf-token" in secrets  # a cluster's own account keeps the binding it always had
