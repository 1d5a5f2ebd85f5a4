"""A job that fills its disk hurts only itself, with a real agent process against the real scheduler (see
conftest.py) and the Cloud Storage stand-in: on a VM running two jobs at once, each with a 4 MB share of
the disk, the one that writes past it is stopped FAILED with the reason and not rerun, its directory
removed; its neighbour completes, and the VM takes the next job."""

from __future__ import annotations


import pytest
from google.cloud import storage as gcs

from tests.agent.conftest import shared_vms_config
from tests.agent.helpers import job_command, wait_for

SHARED = "8xa100-40gb"
SHARE_BYTES = 4_000_000


@pytest.fixture
def config(project):
    return shared_vms_config(project, SHARED)


@pytest.fixture
def bucket(storage):
    client = gcs.Client()
    client.create_bucket("out-bkt")
    return client.bucket("out-bkt")


def submit(scheduler, job_id: str, *args: str) -> None:
    scheduler._publish(scheduler.config.topics.job_submitted, {
        "job_id": job_id, "user_id": "alice", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4,
        "command": job_command(*args), "outputs": "gs://out-bkt/runs"})


def test_the_job_over_its_disk_share_is_stopped_failed_with_the_reason_while_its_neighbour_completes(
        scheduler, agents, storage, bucket, tmp_path):
    work = tmp_path / "work"
    agent = agents.start("vm-a", ZEN_CLUSTER=SHARED, STORAGE_EMULATOR_HOST=storage.address,
                         ZEN_AGENT_WORK_DIR=str(work), ZEN_AGENT_DISK_PER_JOB_BYTES=str(SHARE_BYTES),
                         ZEN_AGENT_DISK_LOOK_S="0.2")
    submit(scheduler, "neighbour", "--fill", "1000000", "--sleep", "6")
    wait_for(lambda: (scheduler.job("neighbour") or None) and scheduler.job("neighbour").status.value == "RUNNING",
             30, what="the neighbour running")
    submit(scheduler, "filler", "--fill", str(2 * SHARE_BYTES), "--sleep", "60")

    filler = scheduler.wait_status("filler", "FAILED", "SUCCEEDED", timeout_s=40)
    running = scheduler.job("neighbour")
    neighbour = scheduler.wait_status("neighbour", "SUCCEEDED", "FAILED", timeout_s=40)

    assert filler.status.value == "FAILED" and filler.exit_code == 143  # SIGTERM, as a stop sends
    first_line = filler.message.splitlines()[0]
    assert first_line.startswith("zen: stopped: the job's work directory reached ")
    assert first_line.endswith(", over its 4.0 MB share of this VM's disk (ZEN_AGENT_DISK_PER_JOB_BYTES); write "
                               "less, or run it alone on a VM (a cluster with max_jobs_per_vm 1); its outputs were "
                               "not uploaded")
    assert [status for attempt, status, _ in scheduler.history("filler")][-2:] == ["RUNNING", "FAILED"]
    assert {attempt for attempt, _, _ in scheduler.history("filler")} == {1}  # not rerun
    assert not list(bucket.list_blobs(prefix="runs/filler/"))
    # The neighbour was running when the filler was stopped, on the same VM, and completed.
    assert running.status.value == "RUNNING" and neighbour.status.value == "SUCCEEDED"
    assert filler.vm == neighbour.vm == "vm-a"
    # Under load the neighbour's first attempt may be lost (late heartbeats); it completes all the same.
    uploaded = bucket.get_blob(f"runs/neighbour/attempt-{neighbour.attempt}/fill.bin")
    assert uploaded is not None and uploaded.size == 1_000_000, (neighbour.attempt, neighbour.message,
                                                                  scheduler.history("neighbour"))
    assert agent.said("stopping the job: over its share of the disk", job_id="filler")
    wait_for(lambda: not [p for p in work.iterdir() if p.name.startswith(("filler", "neighbour"))], 10,
             what="both attempts' directories removed")

    # The VM keeps working.
    submit(scheduler, "next", "--fill", "1000")
    assert scheduler.wait_status("next", "SUCCEEDED", timeout_s=30).vm == "vm-a"
