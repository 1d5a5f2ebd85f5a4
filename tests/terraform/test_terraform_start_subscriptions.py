"""One start subscription per (cluster, region), whatever its provisioning models: `zen-job-start-<cluster>-
<region>` names no model, and every pool's agents of the region pull from it. Made once per pool (cluster,
region, model), a cluster with two models had two resources of one name: the apply failed on the second
(409), and dropping a model later would destroy the subscription the region's agents pull from."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import textwrap

import pytest

from tests.terraform.hcl import TERRAFORM, Module


def test_the_start_subscriptions_are_made_from_one_entry_per_cluster_and_region():
    module = Module.load()
    subscription = module.resources_of("google_pubsub_subscription")["job_start"]
    assert subscription["for_each"] == "${local.start_subscriptions}"
    assert "model" not in subscription["name"]
    assert "target.model == local.cluster_provisioning[target.cluster][0]" in module.locals["start_subscriptions"]


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_a_cluster_of_two_models_gets_one_start_subscription_per_region(tmp_path):
    """Evaluated by terraform itself over main.tf's own `mig_targets` and `start_subscriptions` (the other
    locals they read given here) and pubsub.tf's name."""
    main = (TERRAFORM / "main.tf").read_text()
    start = re.search(r"^  start_subscriptions = .*$", main, re.M).group(0)
    pubsub = (TERRAFORM / "pubsub.tf").read_text()
    block = re.search(r'resource "google_pubsub_subscription" "job_start" \{(.*?)\n\}', pubsub, re.S).group(1)
    name = re.search(r'\n\s*name\s*=\s*(".*")', block).group(1).replace("each.value.", "t.")
    (tmp_path / "main.tf").write_text(textwrap.dedent("""
        variable "default_image" { default = "image" }
        variable "subnetworks" { default = {} }
        locals {
          job_start_prefix = "zen-job-start-"
          clusters = [for c in [["2xh100", ["us-east5", "europe-west4"]], ["1xl4", ["us-east4"]]] : {
            name = c[0], regions = c[1], machine_type = "m", gpu_type = "g", gpu_count = 1, image = null,
            boot_disk_size_gb = 200, zones = {} }]
          cluster_provisioning = { "2xh100" = ["spot", "standard", "flex-start"], "1xl4" = ["standard"] }
          mig_suffix = { spot = "spot", standard = "std", "flex-start" = "flex" }
          config_flex_start_run_s = {}
          config_compact = {}
          workload_policy_types = "^$"
          cluster_region_tags = { "2xh100" = { "us-east5" = [], "europe-west4" = [] }, "1xl4" = { "us-east4" = [] } }
          config_pull_limits = {}
          config_jobs_per_vm = {}
        %s
        %s
        }
        """) % (main_local_list("mig_targets", main), start))
    env = {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1"}
    result = subprocess.run(["terraform", "console"], input="jsonencode({ for key, t in local.start_subscriptions : "
                            "key => %s })\n" % name, cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    names = json.loads(json.loads(result.stdout.strip().splitlines()[-1]))
    assert names == {"2xh100/us-east5": "zen-job-start-2xh100-us-east5",
                     "2xh100/europe-west4": "zen-job-start-2xh100-europe-west4",
                     "1xl4/us-east4": "zen-job-start-1xl4-us-east4"}


def main_local_list(name: str, main: str) -> str:
    """main.tf's ``local.<name> = merge([ ... ]...)``, as written there."""
    return re.search(rf"^  {name} = merge\(\[.*?^  \]\.\.\.\)", main, re.S | re.M).group(0)

