"""Terraform for several jobs per VM (issue 15): each instance template carries the VM's GPUs and its
cluster's ``max_jobs_per_vm`` under the attribute names the agent reads (``zen.agent.slots``), and
what terraform writes reads back as the configuration's value (``terraform console``, when the binary
is on the PATH)."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml

from tests.terraform.hcl import Module, render_local
from zen.agent.settings import parse_limit
from zen.agent.slots import GPUS_ATTRIBUTE, MAX_JOBS_ATTRIBUTE
from zen.core.config import ZenConfig

SHARED_CONFIG = """
clusters:
  - {name: a, gpu_type: t, gpu_count: 8, regions: [r], max_vms_per_region: 1, max_vms: 1, max_jobs_per_vm: 2}
  - {name: b, gpu_type: t, gpu_count: 1, regions: [r], max_vms_per_region: 1, max_vms: 1}
"""


def test_each_template_carries_the_vms_gpus_and_jobs_at_once_under_the_names_the_agent_reads():
    module = Module.load()
    metadata = module.resources_of("google_compute_instance_template")["zen"]["metadata"]
    expected = {GPUS_ATTRIBUTE: r"tostring\(each\.value\.gpu_count\)",
                MAX_JOBS_ATTRIBUTE: r"each\.value\.max_jobs_per_vm\b"}
    for attribute, value in expected.items():
        assert re.search(rf"\b{attribute}\s*=\s*{value}", metadata), (attribute, metadata)
    targets = re.findall(r"(\w+)\s*=", module.locals["mig_targets"])
    assert "max_jobs_per_vm" in targets and "config_jobs_per_vm" in module.locals


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_the_attribute_terraform_writes_reads_back_as_the_configured_jobs_at_once(tmp_path):
    rendered = render_local("config_jobs_per_vm", SHARED_CONFIG, tmp_path)

    config = ZenConfig.model_validate(yaml.safe_load(SHARED_CONFIG))
    assert {name: parse_limit(MAX_JOBS_ATTRIBUTE, raw, integer=True) for name, raw in rendered.items()} == {
        c.name: c.max_jobs_per_vm for c in config.clusters} == {"a": 2, "b": 1}
