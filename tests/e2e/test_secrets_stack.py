"""End to end: a job's secret on the whole local stack. The stack's Secret Manager stand-in serves
``demo-token``; a job naming it reads it on its VM (the agent, through the official client), its output
shows it masked, and Postgres holds the reference alone. Run alone with `pytest -m e2e`."""

from __future__ import annotations

import json
import sys
import time

import pytest

from tests.stack_support import free_base_port
from zen_dev.local.environment import overridden_environ
from zen_dev.local.stack import DEMO_SECRET_VALUE, LocalStack, Ports, demo_secret

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
    (home / "zen.yaml").write_text(CONFIG)
    (home / "scenario.yaml").write_text(SCENARIO)
    stack = LocalStack(home=home / "stack", config_path=home / "zen.yaml", scenario=home / "scenario.yaml",
                       tick_every_s=2.0, ports=Ports.from_base(free_base_port(start=29000)), fresh=True)
    reference = f"{demo_secret('zen-secrets')}/versions/latest"
    record = stack.up()
    try:
        with overridden_environ(record["env"]):
            from google.cloud import pubsub_v1

            from zen.store import repository
            from zen.store.db import Database

            publisher = pubsub_v1.PublisherClient()
            topic = publisher.topic_path("zen-secrets", stack.config.topics.job_submitted)
            command = [sys.executable, "-c", "import os; print('token:', os.environ['DEMO_TOKEN'])"]
            body = {"job_id": "secret-1", "user_id": "demo", "cluster": "1xl4", "command": command,
                    "secrets": {"DEMO_TOKEN": reference}}
            publisher.publish(topic, json.dumps(body).encode(), **stack.sender("demo")).result(30)
            db = Database.from_env()
            deadline = time.monotonic() + 150
            job = None
            while time.monotonic() < deadline and not (job and job.status.terminal):
                time.sleep(1)
                with db.transaction() as session:
                    job = repository.get_job(session, "secret-1")
            with db.transaction() as session:
                stored = session.sql("SELECT count(*) AS n FROM jobs WHERE strpos(request::text, :value) > 0",
                                     value=DEMO_SECRET_VALUE)
    finally:
        stack.down()
    assert job is not None and job.status.value == "SUCCEEDED", job
    assert "token: ***" in (job.message or "") and DEMO_SECRET_VALUE not in (job.message or "")
    assert job.request["secrets"] == {"DEMO_TOKEN": reference} and stored == [{"n": 0}]
