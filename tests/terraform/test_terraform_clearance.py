"""Terraform for data clearance: a bucket holding a prefix of the configuration's data_clearance is granted
only to the agent accounts of the clusters that carry its bindings' tags; other buckets to every cluster.

The locals of terraform/iam.tf are evaluated for real with ``terraform console`` (no providers needed: only
locals and variables) when the terraform binary is on the PATH, and compared with the clusters whose VMs
Zen's placement lets read the data (``ClusterConfig.tags_of``, ``zen.core.clearance``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap

import pytest
import yaml

from tests.terraform.hcl import TERRAFORM, Module
from zen.core.config import ZenConfig

CONFIG = """
clusters:
  - {name: 4xa100-40gb, gpu_type: nvidia-tesla-a100, gpu_count: 4, regions: [us-central1, us-west1],
     max_vms_per_region: 1, max_vms: 2, region_tags: {us-central1: [hipaa]}}
  - {name: 8xa100-40gb, gpu_type: nvidia-tesla-a100, gpu_count: 8, regions: [us-central1],
     max_vms_per_region: 1, max_vms: 1, tags: [hipaa, eu]}
  - {name: 1xl4, gpu_type: nvidia-l4, gpu_count: 1, regions: [us-east4], max_vms_per_region: 1, max_vms: 1}
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
        assert "local.cleared_clusters" in module.locals[name], f"{name} ignores data_clearance"
    assert module.locals["clearance_bindings"].startswith("${[for b in try(local.zen_config.data_clearance, [])")


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_a_bound_bucket_is_granted_only_to_the_cleared_clusters_agents(tmp_path):
    (tmp_path / "zen.yaml").write_text(CONFIG)
    (tmp_path / "main.tf").write_text(textwrap.dedent("""
        variable "agent_input_buckets" { default = %s }
        variable "agent_output_buckets" { default = ["mixed"] }
        variable "agent_image_repositories" { default = [] }
        locals {
          zen_config     = yamldecode(file("${path.module}/zen.yaml"))
          agent_clusters = { for c in local.zen_config.clusters : c.name => "zen-ag-${c.name}" }
        }
        """) % json.dumps(BUCKETS) + _locals_block("clearance_bindings") + _locals_block("agent_input_bindings"))
    query = "jsonencode([local.agent_input_bindings, local.agent_output_bindings])\n"
    result = subprocess.run(["terraform", "console"], input=query, cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    inputs, outputs = json.loads(json.loads(result.stdout.strip().splitlines()[-1]))

    def members(bindings: dict) -> dict[str, list[str]]:
        by_bucket: dict[str, list[str]] = {}
        for binding in bindings.values():
            by_bucket.setdefault(binding["bucket"], []).append(binding["cluster"])
        return {bucket: sorted(clusters) for bucket, clusters in by_bucket.items()}

    granted = members(inputs)
    # the clusters Zen's placement lets read each bucket's bound data: a region carrying all of every binding's tags
    config = ZenConfig.model_validate(yaml.safe_load(CONFIG))
    cleared = {bucket: sorted(c.name for c in config.clusters if all(
        any(set(b.tags) <= set(c.tags_of(r)) for r in c.regions)
        for b in config.data_clearance if b.bucket == bucket)) for bucket in BUCKETS}
    assert granted == cleared
    assert granted == {"genomics-private": ["4xa100-40gb", "8xa100-40gb"],  # hipaa: one region, or all
                       "mixed": ["8xa100-40gb"],  # both prefixes' tags: the whole bucket is cleared-only
                       "public-data": ["1xl4", "4xa100-40gb", "8xa100-40gb"]}  # unbound: every cluster, as before
    assert members(outputs) == {"mixed": ["8xa100-40gb"]}
