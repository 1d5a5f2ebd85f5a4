"""A standard VM's host maintenance notice is a preemption's notice to its agent. A VM with GPUs cannot live-migrate:
GCE terminates it about 60 s after its metadata's ``instance/maintenance-event`` turns ``TERMINATE_ON_HOST_MAINTENANCE``
(and restarts a standard one). The agent watched only ``instance/preempted``: its job ran on to the termination, lost
its work since its last periodic checkpoint save, and Zen found the attempt only when its heartbeats stopped. A real
agent watches the Compute stand-in's metadata (ZEN_PREEMPTION_METADATA_HOST), the real scheduler and the Cloud
Storage stand-in behind it: at the notice the job checkpoints (``ZEN_PREEMPTION_NOTICE``), the agent saves that
checkpoint, reports PREEMPTED in words of a host maintenance (its user is told the job was requeued, not preempted),
claims nothing more, and the job is requeued at once without spending an attempt; another VM's rerun restores it."""

from __future__ import annotations

import json
import sys

import pytest
from google.cloud import storage as gcs

from tests.agent.helpers import names_a_save
from tests.agent.test_checkpoint_notice import JOB, config  # noqa: F401 (its fixture: checkpoints to ckpt-bkt)
from tests.local.test_compute_maintenance import standard_standin
from tests.local.test_compute_standin import BOOT_S, Cloud
from tests.waiting import wait_for
from zen.core.notify import verb

NOTICE_S = 60.0  # GCE's maintenance notice: from it to the VM's termination


@pytest.fixture
def cloud(tmp_path):
    standin, mig = standard_standin(tmp_path, maintenance_notice_s=NOTICE_S)
    yield Cloud(standin.start()), mig
    standin.stop()


def test_the_maintenance_notice_saves_the_checkpoint_and_requeues_the_job_unspent(
        scheduler, agents, storage, cloud, tmp_path):
    cloud, mig = cloud
    bucket = gcs.Client().create_bucket("ckpt-bkt")
    cloud.resize(1, mig=mig)
    cloud.advance(BOOT_S + 1)
    (inst,) = cloud.instances(mig=mig)
    agent = agents.start(inst.name, STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(tmp_path / "work"),
                         ZEN_PREEMPTION_METADATA_HOST=f"{cloud.standin.endpoint}/zen-local/vms/{inst.name}")
    ready = tmp_path / "job-ready"
    scheduler.submit("std-1", [sys.executable, "-c", JOB], checkpoint={"every": 600}, env={"READY_FILE": str(ready)},
                     max_attempts=1)
    scheduler.wait_status("std-1", "RUNNING")
    wait_for(ready.exists, timeout_s=30, what="the job's SIGTERM handler in place")

    cloud.maintenance(inst)

    manifest = bucket.blob("checkpoints/4xa100-40gb/std-1/LATEST.json")
    try:
        wait_for(lambda: names_a_save(bucket, manifest.name),
                 timeout_s=NOTICE_S / 2, what="the checkpoint saved after the maintenance notice")
    except AssertionError as missing:
        said = [line["message"] for line in agent.logs()][-15:]
        raise AssertionError(f"{missing}; the job's history: {scheduler.history('std-1')}; the agent's last "
                             f"words: {said}") from None
    assert agent.said("metadata server reports a host maintenance: GCE terminates this VM in about 60 s")
    saved = json.loads(manifest.download_as_bytes())
    assert saved["attempt"] == 1 and [f["path"] for f in saved["files"]] == ["at-notice"]
    job = wait_for(lambda: (j := scheduler.job("std-1")).attempt == 2 and j, 10, what="requeued")
    assert (job.status.value, job.max_attempts) == ("QUEUED", 2)  # at once, its attempt unspent
    [lost] = [reason for _, status, reason in scheduler.history("std-1") if status == "LOST"]
    assert lost == f"VM {inst.name} is stopping for host maintenance (no attempt spent)", lost
    assert verb("PREEMPTED", {"reason": lost}) == "was requeued"  # no preemption of a standard VM

    agents.start("vm-b", STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(tmp_path / "work-b"))
    job = scheduler.wait_status("std-1", "SUCCEEDED", timeout_s=30)
    assert "restored: step " in job.message and job.vm == "vm-b"  # the VM under maintenance took it no more
