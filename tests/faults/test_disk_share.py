"""End to end, a fault: a job that fills its disk on a shared VM (issue 34). Through the whole local stack
(the Compute stand-in's agent, the functions, the ticker, the storage stand-in), one VM runs two jobs at
once, each with a 4 MB share of the work disk (``ZEN_AGENT_DISK_PER_JOB_BYTES``). One writes 8 MB: it is
stopped FAILED with the reason and not rerun; its neighbour completes with its outputs uploaded, and the
VM takes the next job in the filler's place.

On code without the quota the filler ran on for its whole minute, the disk filling as it pleased."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.faults.stack import until
from tests.stack_support import decisions, home, job_view, refusal, running_stack, submit_as  # noqa: F401 - the fixture

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).parent / "fixtures"
WRITE = """
import os, sys, time
with open(os.path.join(os.environ["ZEN_OUTPUT_DIR"], "written.bin"), "wb") as out:
    for _ in range(int(sys.argv[1]) // 65536):
        out.write(b"x" * 65536); out.flush(); os.fsync(out.fileno())
print("written", flush=True)
end = time.time() + float(sys.argv[2])
while time.time() < end and not (len(sys.argv) > 3 and os.path.exists(sys.argv[3])):
    time.sleep(0.1)
"""


def _over(job_id: str) -> dict | None:
    job = job_view(job_id)
    return job if job.get("status") in ("SUCCEEDED", "FAILED", "CANCELLED") else None


def test_a_job_that_fills_its_disk_on_a_shared_vm_is_stopped_and_its_neighbour_completes(
        home, tmp_path, stack_forks):  # noqa: F811
    from google.cloud import storage as gcs

    released = tmp_path / "released"  # the neighbour runs until it exists (30 s at most)

    with running_stack(home, (FIXTURES / "disk-share.yaml").read_text(),
                       (FIXTURES / "disk-share-scenario.yaml").read_text(), start=22000, tick_every_s=1.0, forks=stack_forks,
                       buckets={"out-bkt": "US"},
                       agent_env={"ZEN_AGENT_DISK_PER_JOB_BYTES": "4000000", "ZEN_AGENT_DISK_LOOK_S": "0.5"}) as stack:
        def submit(job_id: str, size: int, sleep_s: float, *until_file: Path) -> None:
            submit_as(stack, "alice", {"job_id": job_id, "user_id": "alice", "gpu_type": "nvidia-l4", "gpu_count": 1,
                                       "command": [sys.executable, "-c", WRITE, str(size), str(sleep_s),
                                                   *map(str, until_file)],
                                       "outputs": "gs://out-bkt/runs"})

        submit("neighbour", 1_000_000, 30, released)
        assert until(lambda: job_view("neighbour").get("status") == "RUNNING", 120), (
            job_view("neighbour") or refusal("neighbour"), decisions()[-10:])
        submit("filler", 8_000_000, 60)
        filler = until(lambda: _over("filler"), 90)
        running = job_view("neighbour")
        # The filler's place on the VM, taken while its neighbour still runs there: the VM is never idle,
        # so the scaler (one VM at most) cannot swap it for a fresh one before the next job comes.
        submit("next", 1000, 0)
        after = until(lambda: _over("next"), 60)
        scaling = decisions()  # why the VM went, if the next job ran on another
        released.touch()
        neighbour = until(lambda: _over("neighbour"), 60)
        uploaded = {blob.name: blob.size for blob in gcs.Client().list_blobs("out-bkt")}
    assert filler and filler["status"] == "FAILED" and filler["attempt"] == 1, filler  # not rerun
    assert filler["message"].startswith("zen: stopped: the job's work directory reached "), filler["message"]
    assert ("over its 4.0 MB share of this VM's disk (ZEN_AGENT_DISK_PER_JOB_BYTES); write less, or run it alone on "
            "a VM (a cluster with max_jobs_per_vm 1); its outputs were not uploaded") in filler["message"]
    assert running["status"] == "RUNNING"  # the neighbour ran beside it ...
    assert neighbour and neighbour["status"] == "SUCCEEDED", neighbour  # ... and completed
    # The VM works on.
    assert filler["vm"] == neighbour["vm"] == after["vm"] and after["status"] == "SUCCEEDED", (after, scaling)
    # Under load the neighbour's first attempt may be lost (late heartbeats); the attempt that completed uploaded.
    manifests = {name for name in uploaded if name.endswith("/_ZEN_OUTPUTS.json")}  # each whole upload's, written last
    assert manifests == {f"runs/neighbour/attempt-{neighbour['attempt']}/_ZEN_OUTPUTS.json",
                         "runs/next/attempt-1/_ZEN_OUTPUTS.json"}
    assert {name: size for name, size in uploaded.items() if name not in manifests} == {
        f"runs/neighbour/attempt-{neighbour['attempt']}/written.bin": 983040, "runs/next/attempt-1/written.bin": 0}
