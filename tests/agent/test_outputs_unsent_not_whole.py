"""A job stopped over its disk share has its outputs not uploaded, and ``zen jobs get`` says they are not whole: the
agent's summary line says so before the output's tail. Without it, the note's lines were followed straight by the
tail, and a job whose output's first line echoed Zen's line that an attempt's outputs are whole (a step printing a
report) was shown with its outputs whole, none of them sent. A real agent process against the real scheduler and the
Cloud Storage stand-in (see conftest.py)."""

from __future__ import annotations

import sys

import pytest
from google.cloud import storage as gcs

from tests.agent.conftest import shared_vms_config
from zen.cli.records import outputs_whereabouts
from zen.core.gcs import WHOLE

SHARED = "8xa100-40gb"
SHARE_BYTES = 4_000_000
WHERE = "gs://out-bkt/runs/echo/attempt-1/"
JOB = """
import os, sys, time
print(sys.argv[1], flush=True)
with open(os.path.join(os.environ["ZEN_OUTPUT_DIR"], "fill.bin"), "wb") as out:
    for _ in range(int(sys.argv[2]) // 65536 + 1):
        out.write(b"x" * 65536); out.flush(); os.fsync(out.fileno())
time.sleep(60)
"""


@pytest.fixture
def config(project):
    return shared_vms_config(project, SHARED)


@pytest.fixture
def bucket(storage):
    client = gcs.Client()
    client.create_bucket("out-bkt")
    return client.bucket("out-bkt")


def test_outputs_a_disk_stop_kept_from_uploading_are_not_shown_whole(scheduler, agents, storage, bucket, tmp_path):
    agents.start("vm-a", ZEN_CLUSTER=SHARED, STORAGE_EMULATOR_HOST=storage.address,
                 ZEN_AGENT_WORK_DIR=str(tmp_path / "work"), ZEN_AGENT_DISK_PER_JOB_BYTES=str(SHARE_BYTES),
                 ZEN_AGENT_DISK_LOOK_S="0.2")
    echoed = f"zen: uploaded 1 file, 8.0 MB in 0.1 s to {WHERE} {WHOLE}"
    scheduler._publish(scheduler.config.topics.job_submitted, {
        "job_id": "echo", "user_id": "alice", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4,
        "command": [sys.executable, "-c", JOB, echoed, str(2 * SHARE_BYTES)],
        "outputs": "gs://out-bkt/runs"})

    job = scheduler.wait_status("echo", "FAILED", "SUCCEEDED", timeout_s=40)

    assert job.status.value == "FAILED" and job.message.startswith("zen: stopped: the job's work directory reached ")
    assert not list(bucket.list_blobs(prefix="runs/echo/"))  # nothing sent
    said = outputs_whereabouts("gs://out-bkt/runs", "echo", job.attempt, 1, True, job.message)  # as zen jobs get shows
    assert said == f"{WHERE} (NOT whole: the upload failed or was cut; no _ZEN_OUTPUTS.json)", job.message
