"""Checkpoints end to end: real agent processes, the real scheduler (Pub/Sub stand-in, the functions,
Postgres; see conftest.py) and the Cloud Storage stand-in through STORAGE_EMULATOR_HOST. A job that counts
steps into ZEN_CHECKPOINT_DIR, its VM shut down mid-run, resumes on the next VM from its checkpoint; one
without ``checkpoint`` starts over."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from google.cloud import storage as gcs

from tests.agent.conftest import DEADLINES
from tests.waiting import wait_for
from zen.core.checkpoints import CheckpointConfig
from zen.core.config import load_config

# Counts to argv[1], one step each argv[2] seconds, each step written whole (a temporary file renamed over
# the last); starts from the step restored. SIGTERM, or ZEN_PREEMPTION_NOTICE appearing, ends it at once.
COUNTER = r"""
import os, signal, sys, time
folder = os.environ.get("ZEN_CHECKPOINT_DIR")
notice = os.environ.get("ZEN_PREEMPTION_NOTICE")
path = os.path.join(folder, "step") if folder else None
step = int(open(path).read()) if path and os.path.exists(path) else 0
print(f"resumed from step {step}" if step else "started at step 0", "ZEN_PREEMPTED=" + os.environ.get("ZEN_PREEMPTED", ""),
      flush=True)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append("SIGTERM"))
while step < int(sys.argv[1]) and not stop:
    step += 1
    if path:
        with open(path + ".tmp", "w") as file:
            file.write(str(step))
        os.replace(path + ".tmp", path)
    print(f"step {step}", flush=True)
    time.sleep(float(sys.argv[2]))
    if notice and os.path.exists(notice):
        stop.append("notice")
print(f"stopped at step {step} ({stop[0]})" if stop else f"done at step {step}", flush=True)
"""


@pytest.fixture
def config(project):
    return load_config().model_copy(update={"project": project, "deadlines": DEADLINES,
                                            "checkpoints": CheckpointConfig(bucket="ckpt-bkt")})


@pytest.fixture
def bucket(storage):
    client = gcs.Client()
    client.create_bucket("ckpt-bkt")
    return client.bucket("ckpt-bkt")


def start_agent(agents, storage, tmp_path, vm: str):
    return agents.start(vm, STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(tmp_path / vm))


def counted(tmp_path: Path, vm: str) -> int:
    """The step the running job's checkpoint holds on that VM (0: none yet)."""
    found = list((tmp_path / vm).glob("*/checkpoint/step"))
    try:
        return int(found[0].read_text()) if found else 0
    except (OSError, ValueError):
        return 0


def test_a_job_whose_vm_goes_away_resumes_from_its_checkpoint(scheduler, agents, storage, bucket, tmp_path):
    first = start_agent(agents, storage, tmp_path, "vm-a")
    scheduler.submit("count-1", [sys.executable, "-c", COUNTER, "40", "0.1"], checkpoint={"every": 30})
    scheduler.wait_status("count-1", "RUNNING")
    wait_for(lambda: counted(tmp_path, "vm-a") >= 5, what="the job counting")

    assert first.terminate() == 0  # the VM shuts down, as a preemption's notice makes it

    job = wait_for(lambda: (j := scheduler.job("count-1")).attempt == 2 and j, 10, what="requeued")
    saved = json.loads(bucket.blob("checkpoints/4xa100-40gb/count-1/LATEST.json").download_as_bytes())
    assert saved["attempt"] == 1 and saved["reason"] == "the attempt ended"
    at = int(bucket.blob(f"checkpoints/4xa100-40gb/count-1/{saved['generation']}step").download_as_bytes())
    assert at >= 5
    [(_, _, lost)] = [entry for entry in scheduler.history("count-1") if entry[1] == "LOST"]
    assert "was preempted" in lost
    assert first.said("job ended", job_id="count-1")

    start_agent(agents, storage, tmp_path, "vm-b")
    job = scheduler.wait_status("count-1", "SUCCEEDED", timeout_s=30)

    assert job.attempt == 2
    assert f"resumed from step {at} ZEN_PREEMPTED=1" in job.message and "done at step 40" in job.message
    assert f"step {at}\n" not in job.message  # the steps before the checkpoint were not run again
    assert [(attempt, status) for attempt, status, _ in scheduler.history("count-1")][3:] == [
        (1, "RUNNING"), (1, "LOST"), (2, "QUEUED"), (2, "ASSIGNED"), (2, "RUNNING"), (2, "SUCCEEDED")]


def test_a_job_without_checkpoint_starts_over(scheduler, agents, storage, bucket, tmp_path):
    first = start_agent(agents, storage, tmp_path, "vm-a")
    scheduler.submit("plain-1", [sys.executable, "-c", COUNTER, "20", "0.1"])
    scheduler.wait_status("plain-1", "RUNNING")
    assert first.terminate() == 0
    wait_for(lambda: scheduler.job("plain-1").attempt == 2, 10, what="requeued")

    start_agent(agents, storage, tmp_path, "vm-b")
    job = scheduler.wait_status("plain-1", "SUCCEEDED", timeout_s=30)

    assert "started at step 0 ZEN_PREEMPTED=1" in job.message and "done at step 20" in job.message
    assert list(bucket.client.list_blobs("ckpt-bkt")) == []


def test_a_checkpoint_asked_of_a_zen_without_a_bucket_is_refused(scheduler, agents, tmp_path, monkeypatch):
    from zen.core.models import JobRequest
    from zen.jobs.placement import Rejected, resolve_request

    request = JobRequest.model_validate({"user_id": "u", "cluster": "4xa100-40gb", "command": ["true"],
                                         "checkpoint": {"every": 60}})
    with pytest.raises(Rejected, match=r"checkpoint: this Zen saves no checkpoints .*checkpoints.bucket"):
        resolve_request(load_config(), request, "j")
    assert resolve_request(scheduler.config, request, "j").cluster == "4xa100-40gb"
