"""End to end: a job's secret on the whole local stack. The stack's Secret Manager stand-in serves
``demo-token``; a job naming it reads it on its VM (the agent, through the official client), its output
shows it masked, and Postgres holds the reference alone. Run alone with `pytest -m e2e`."""

from __future__ import annotations

import sys

import pytest

from tests.stack_support import ended, running_stack, submit_as
from zen_dev.local.stack import DEMO_SECRET_VALUE, demo_secret

pytestmark = pytest.mark.e2e

CONFIG = """
project: zen-secrets
clusters:
  - name: 1xl4
    gpu_type: nvidia-l4
    gpu_count: 1
    machine_type: g2-standard-8
    regions: [us-central1]
    max_vms_per_region: 1
    max_vms: 1
secrets: [projects/zen-secrets/secrets/demo-*/versions/*]
deadlines:
  heartbeat_timeout_s: 20
  boot_timeout_s: 120
  idle_timeout_s: 10
  stop_timeout_s: 30
  agent_heartbeat_s: 2
  stop_grace_s: 2
scaling:
  boot_estimate_s: 5
"""

SCENARIO = """
project: zen-secrets
seed: 3
time_scale: 10
capacity:
  default: 2
timings:
  boot: {dist: fixed, s: 40}
  retry_interval_s: 30
  delete_s: 10
"""


def test_a_job_reads_the_stacks_demo_secret_and_its_output_masks_it(home):
    from zen.store.db import Database

    reference = f"{demo_secret('zen-secrets')}/versions/latest"
    with running_stack(home, CONFIG, SCENARIO, start=29000) as stack:
        command = [sys.executable, "-c", "import os; print('token:', os.environ['DEMO_TOKEN'])"]
        submit_as(stack, "demo", {"job_id": "secret-1", "user_id": "demo", "cluster": "1xl4", "command": command,
                                  "secrets": {"DEMO_TOKEN": reference}})
        [job] = ended(["secret-1"], 150)
        with Database.from_env().transaction() as session:
            stored = session.sql("SELECT count(*) AS n FROM jobs WHERE strpos(request::text, :value) > 0",
                                 value=DEMO_SECRET_VALUE)
    assert job is not None and job.status.value == "SUCCEEDED", job
    assert "token: ***" in (job.message or "") and DEMO_SECRET_VALUE not in (job.message or "")
    assert job.request["secrets"] == {"DEMO_TOKEN": reference} and stored == [{"n": 0}]
