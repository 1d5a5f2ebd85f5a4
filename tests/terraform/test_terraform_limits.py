"""Terraform for the per-day pull limits (issue 15): each instance template carries its cluster's
limits as instance attributes, and what terraform writes there reads back, through the agent's own
parser, as the configuration's values (the expression evaluated for real with ``terraform console``
when the binary is on the PATH)."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml

from tests.terraform.hcl import Module, render_local
from zen.agent.limits import GPU_HOURS_ATTRIBUTE, JOBS_ATTRIBUTE, parse_limit
from zen.core.config import ZenConfig

LIMITED_CONFIG = """
clusters:
  - {name: a, gpu_type: t, gpu_count: 4, regions: [r], max_vms_per_region: 1, max_vms: 1,
     max_jobs_per_vm_day: 20, max_gpu_hours_per_vm_day: 40.5}
  - {name: b, gpu_type: t, gpu_count: 1, regions: [r], max_vms_per_region: 1, max_vms: 1}
  - {name: c, gpu_type: t, gpu_count: 8, regions: [r], max_vms_per_region: 1, max_vms: 1,
     max_jobs_per_vm_day: null, max_gpu_hours_per_vm_day: 1000000}
"""


def test_each_template_carries_its_clusters_pull_limits_under_the_names_the_agent_reads():
    module = Module.load()
    metadata = module.resources_of("google_compute_instance_template")["zen"]["metadata"]
    assert re.search(rf"\b{JOBS_ATTRIBUTE}\s*=\s*each\.value\.max_jobs_per_day\b", metadata), metadata
    assert re.search(rf"\b{GPU_HOURS_ATTRIBUTE}\s*=\s*each\.value\.max_gpu_hours_per_day\b", metadata), metadata
    assert "config_pull_limits" in module.locals
    assert {"max_jobs_per_day", "max_gpu_hours_per_day"} <= set(re.findall(r"(\w+)\s*=", module.locals["mig_targets"]))


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_the_attributes_terraform_writes_read_back_as_the_configured_limits(tmp_path):
    rendered = render_local("config_pull_limits", LIMITED_CONFIG, tmp_path)

    config = ZenConfig.model_validate(yaml.safe_load(LIMITED_CONFIG))
    read_back = {name: (parse_limit(JOBS_ATTRIBUTE, values["jobs"], integer=True),
                        parse_limit(GPU_HOURS_ATTRIBUTE, values["gpu_hours"], integer=False))
                 for name, values in rendered.items()}
    assert read_back == {c.name: (c.max_jobs_per_vm_day, c.max_gpu_hours_per_vm_day) for c in config.clusters}
    assert rendered["b"] == {"jobs": "", "gpu_hours": ""}  # no limit: the attribute is set, empty
