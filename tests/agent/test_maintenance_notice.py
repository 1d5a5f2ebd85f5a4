"""A standard VM's host maintenance notice: no more jobs there, its job runs on, and GCE's stop is told as such. A VM
with GPUs cannot live-migrate: GCE stops it within the hour after its metadata's ``instance/maintenance-event`` turns
``TERMINATE_ON_HOST_MAINTENANCE`` (and restarts a standard one). Stopped at the notice, a job lost up to an hour of
work it could have done (or finished), and the VM stayed idle and billed to its end; ignored, the VM took new jobs
it would cut within the hour, and its stop was told as a preemption. A real agent watches the Compute stand-in's
metadata (ZEN_PREEMPTION_METADATA_HOST), the real scheduler and the Cloud Storage stand-in behind it: at the notice
it takes no more jobs (RETIRED once its job is over) while its job runs on; GCE's stop (SIGTERM through systemd, as a
preemption's) has the job checkpoint (``ZEN_PREEMPTION_NOTICE``), the agent save it and report PREEMPTED in words of a
host maintenance (its user told the job was requeued, not preempted), and the job is requeued at once without
spending an attempt; another VM's rerun restores it."""

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


@pytest.fixture
def cloud(tmp_path):
    standin, mig = standard_standin(tmp_path)  # GCE's hour: the test stops the agent itself, as GCE's stop would
    yield Cloud(standin.start()), mig
    standin.stop()


def booted(cloud: Cloud, mig: str, agents, storage, tmp_path):
    """The standard MIG's one VM, booted, and its agent, which watches the stand-in's metadata for it."""
    cloud.resize(1, mig=mig)
    cloud.advance(BOOT_S + 1)
    (inst,) = cloud.instances(mig=mig)
    return inst, agents.start(inst.name, STORAGE_EMULATOR_HOST=storage.address,
                              ZEN_AGENT_WORK_DIR=str(tmp_path / "work"),
                              ZEN_PREEMPTION_METADATA_HOST=f"{cloud.standin.endpoint}/zen-local/vms/{inst.name}")


def test_at_the_maintenance_notice_the_vm_takes_no_more_jobs_and_at_gces_stop_the_job_is_requeued_unspent(
        scheduler, agents, storage, cloud, tmp_path):
    cloud, mig = cloud
    bucket = gcs.Client().create_bucket("ckpt-bkt")
    inst, agent = booted(cloud, mig, agents, storage, tmp_path)
    ready = tmp_path / "job-ready"
    scheduler.submit("std-1", [sys.executable, "-c", JOB], checkpoint={"every": 600}, env={"READY_FILE": str(ready)},
                     max_attempts=1)
    scheduler.wait_status("std-1", "RUNNING")
    wait_for(ready.exists, timeout_s=30, what="the job's SIGTERM handler in place")

    cloud.maintenance(inst)  # the agent's long poll answers at once
    for _ in range(3):  # three of its heartbeats later (stopped at the notice, it was requeued within one)
        heard = scheduler.job("std-1").last_heartbeat_at
        wait_for(lambda: (j := scheduler.job("std-1")).last_heartbeat_at != heard or j.status.value != "RUNNING",
                 timeout_s=30, what="a heartbeat")
    job = scheduler.job("std-1")
    assert (job.status.value, job.attempt) == ("RUNNING", 1), scheduler.history("std-1")  # it runs on
    assert agent.said("metadata server reports a host maintenance: GCE stops this VM within the hour")
    manifest = bucket.blob("checkpoints/4xa100-40gb/std-1/LATEST.json")

    agent.process.terminate()  # GCE's stop: the ACPI power button, systemd's SIGTERM to the agent
    try:
        wait_for(lambda: names_a_save(bucket, manifest.name), timeout_s=30, what="the checkpoint saved at GCE's stop")
    except AssertionError as missing:
        said = [line["message"] for line in agent.logs()][-15:]
        raise AssertionError(f"{missing}; the job's history: {scheduler.history('std-1')}; the agent's last "
                             f"words: {said}") from None
    saved = json.loads(manifest.download_as_bytes())
    assert saved["attempt"] == 1 and [f["path"] for f in saved["files"]] == ["at-notice"]
    job = wait_for(lambda: (j := scheduler.job("std-1")).attempt == 2 and j, 10, what="requeued")
    assert (job.status.value, job.max_attempts) == ("QUEUED", 2)  # at once, its attempt unspent
    [lost] = [reason for _, status, reason in scheduler.history("std-1") if status == "LOST"]
    assert lost == f"VM {inst.name} is stopping for host maintenance (no attempt spent)", lost
    assert verb("PREEMPTED", {"reason": lost}) == "was requeued"  # no preemption of a standard VM

    agents.start("vm-b", STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(tmp_path / "work-b"))
    job = scheduler.wait_status("std-1", "SUCCEEDED", timeout_s=30)
    assert "restored: step " in job.message and job.vm == "vm-b"


def test_a_job_that_ends_within_the_notice_leaves_its_vm_retired(scheduler, agents, storage, cloud, tmp_path):
    cloud, mig = cloud
    inst, agent = booted(cloud, mig, agents, storage, tmp_path)
    go = tmp_path / "go"
    scheduler.submit("std-1", [sys.executable, "-c", WAITS], env={"GO_FILE": str(go)}, max_attempts=1)
    scheduler.wait_status("std-1", "RUNNING")

    cloud.maintenance(inst)
    wait_for(lambda: agent.said("metadata server reports a host maintenance: GCE stops this VM within the hour"),
             timeout_s=30, what="the notice heard")
    go.write_text("go")  # the job ends within the notice's hour
    assert scheduler.wait_status("std-1", "SUCCEEDED", timeout_s=30).attempt == 1
    wait_for(lambda: (scheduler.vm(inst.name) or {}).get("state") == "RETIRED", 30, what="the VM retired")


# A job that runs until its GO_FILE exists.
WAITS = r"""
import os, time
while not os.path.exists(os.environ["GO_FILE"]):
    time.sleep(0.05)
"""
