"""End to end on the whole local stack (``zen local up``): the notifier runs as a function behind the event
bridge; a job that ends tells the local webhook sink, through the secret the stack's Secret Manager holds;
one whose endpoint answers 500 every time is retried with backoff and its event ends in
``zen-job-events-dead-letter``; the sink's URL is in no row and no log file. Run alone with `pytest -m e2e`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.agent.test_secrets import where_in_postgres
from tests.stack_support import ended as ended_jobs, running_stack, submit_as

pytestmark = pytest.mark.e2e

CONFIG = """
project: zen-notify
clusters:
  - name: 1xl4
    gpu_type: nvidia-l4
    gpu_count: 1
    machine_type: g2-standard-8
    regions: [us-central1]
    max_vms_per_region: 2
    max_vms: 2
secrets: [projects/zen-notify/secrets/zen-notify-*/versions/*]
notifications:
  timeout_s: 2
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
project: zen-notify
seed: 3
time_scale: 10
capacity:
  default: 4
timings:
  boot: {dist: fixed, s: 20}
  retry_interval_s: 30
  delete_s: 10
"""


def sink_lines(home: Path) -> list[dict]:
    path = home / "notifications.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_job_tells_the_local_sink_and_a_failing_endpoint_ends_in_the_dead_letter(home, stack_forks):
    stack_home = home / "stack"
    with running_stack(home, CONFIG, SCENARIO, start=24000, forks=stack_forks) as stack:
        from google.cloud import pubsub_v1

        from zen.store import notifications
        from zen.store.db import Database

        sink_port = stack.ports.sink
        jobs = {"ok-1": (0, "zen-notify-local-sink"), "bad-2": (3, "zen-notify-local-sink-500")}
        for job_id, (code, name) in jobs.items():
            submit_as(stack, "demo", {"job_id": job_id, "user_id": "demo", "cluster": "1xl4",
                                      "command": [sys.executable, "-c", f"import sys; sys.exit({code})"],
                                      "notify": [{"webhook": f"projects/zen-notify/secrets/{name}/versions/latest"}]})
        ended = dict(zip(jobs, ended_jobs(list(jobs), 150)))
        subscriber = pubsub_v1.SubscriberClient()
        dead = subscriber.subscription_path("zen-notify", "zen-job-events-dead-letter")
        deadline, dead_letters = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            if not dead_letters:
                dead_letters = subscriber.pull(subscription=dead, max_messages=10, timeout=5).received_messages
            if dead_letters and any(r["path"] == "/local-sink" for r in sink_lines(stack_home)):
                break
            time.sleep(1)
        db = Database.from_env()
        with db.transaction() as session:
            rows = {j: notifications.of_job(session, j) for j in jobs}
        hidden = where_in_postgres(db, f"127.0.0.1:{sink_port}")
        db.close()

    assert {j: job.status.value for j, job in ended.items() if job} == {"ok-1": "SUCCEEDED", "bad-2": "FAILED"}
    received = sink_lines(stack_home)
    [told] = [r for r in received if r["path"].endswith("/local-sink") and r["body"]["job_id"] == "ok-1"]
    assert told["body"]["event"] == "SUCCEEDED" and told["answer"] == 200
    failing = [r for r in received if r["path"] == "/status/500/local-sink"]
    assert len(failing) == 5 and {r["body"]["event"] for r in failing} == {"FAILED"}  # max_delivery_attempts
    assert len({r["delivery"] for r in failing}) == 1  # one notice, tried five times
    assert [json.loads(m.message.data)["job_id"] for m in dead_letters] == ["bad-2"]
    assert [(r["state"], r["tries"]) for r in rows["ok-1"]] == [("sent", 1)]
    assert [(r["state"], r["tries"], r["detail"]) for r in rows["bad-2"]] == [("failed", 5, "HTTP 500")]
    assert hidden == []
    logged = "\n".join(p.read_text(errors="replace") for p in (stack_home / "logs").rglob("*.log")
                       if p.name != "sink.log")
    assert "notification sent" in logged and f":{sink_port}/" not in logged
