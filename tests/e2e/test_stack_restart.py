"""End to end: stopping the local stack while a job runs. Its VMs' agents are stopped first, while the
functions still run, so each reports its job PREEMPTED and Zen requeues it at once (``hand_back``):
after a restart the job showed RUNNING on a VM that was gone, for two minutes, and was then rerun as
LOST. Run alone with `pytest -m e2e`."""

from __future__ import annotations

import json
import sys
import time

import pytest

from tests.stack_support import free_base_port
from zen_dev.local.environment import overridden_environ
from zen_dev.local.stack import LocalStack, Ports, hand_back

pytestmark = pytest.mark.e2e

CONFIG = """
project: zen-restart
clusters:
  - name: 1xl4
    gpu_type: nvidia-l4
    gpu_count: 1
    machine_type: g2-standard-8
    regions: [us-central1]
    max_vms_per_region: 1
    max_vms: 1
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
project: zen-restart
seed: 3
time_scale: 10
capacity:
  default: 2
timings:
  boot: {dist: fixed, s: 40}
  retry_interval_s: 30
  delete_s: 10
"""


def test_a_running_job_is_handed_back_to_the_queue_when_the_stack_stops_and_runs_again_after_up(home, stack_forks):
    """... and a restarted stack runs it again at once: its requeued start had gone to the Pub/Sub stand-in,
    which keeps messages in memory only, so the job waited an hour (start_republish_s) beside idle VMs."""
    (home / "zen.yaml").write_text(CONFIG)
    (home / "scenario.yaml").write_text(SCENARIO)

    def new_stack(fresh: bool) -> LocalStack:
        return LocalStack(home=home / "stack", config_path=home / "zen.yaml", scenario=home / "scenario.yaml",
                          tick_every_s=2.0, ports=Ports.from_base(free_base_port(start=23500)), fresh=fresh,
                          forks=stack_forks)

    stack = new_stack(fresh=True)
    record = stack.up()
    try:
        with overridden_environ(record["env"]):
            from google.cloud import pubsub_v1

            from zen.store import repository
            from zen.store.db import Database

            publisher = pubsub_v1.PublisherClient()
            topic = publisher.topic_path("zen-restart", stack.config.topics.job_submitted)
            body = {"job_id": "long-1", "user_id": "demo", "cluster": "1xl4",
                    "command": [sys.executable, "-c", "import time; time.sleep(600)"]}
            publisher.publish(topic, json.dumps(body).encode(), **stack.sender("demo")).result(30)
            db = Database.from_env()

            def job():
                with db.transaction() as session:
                    return repository.get_job(session, "long-1")

            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and (job() is None or job().status.value != "RUNNING"):
                time.sleep(0.5)
            assert job().status.value == "RUNNING", job()

            assert hand_back(stack.processes, stack.env) == 0  # the VMs' agents stopped: no job holds one
            after = job()
            with db.transaction() as session:
                history = [(r["to_status"], r["reason"]) for r in repository.job_history(session, "long-1")]
            db.close()
    finally:
        stack.down()
    assert (after.status.value, after.attempt) == ("QUEUED", 2), history
    assert ("LOST", f"VM {history[2][1].split()[-1]} was preempted (no attempt spent)") in history, history

    again = new_stack(fresh=False)
    record = again.up()
    assert again.republished == 1
    try:
        with overridden_environ(record["env"]):
            from zen.store import repository
            from zen.store.db import Database

            db = Database.from_env()
            try:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    with db.transaction() as session:
                        job = repository.get_job(session, "long-1")
                    if job.status.value == "RUNNING":
                        break
                    time.sleep(0.5)
            finally:
                db.close()
    finally:
        again.down()
    assert (job.status.value, job.attempt) == ("RUNNING", 2), job
