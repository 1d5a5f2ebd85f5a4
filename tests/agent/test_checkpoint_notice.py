"""A spot VM's preemption notice saves the checkpoint inside GCE's ~30 s: a real agent watches the Compute
stand-in's ``instance/preempted`` (ZEN_PREEMPTION_METADATA_HOST), the real scheduler and the Cloud Storage
stand-in behind it. The job checkpoints when ``ZEN_PREEMPTION_NOTICE`` appears (it ignores SIGTERM), the
agent saves that checkpoint, reports PREEMPTED, and the rerun restores it."""

from __future__ import annotations

import json
import sys
import time

import pytest
from google.cloud import storage as gcs

from tests.agent.conftest import DEADLINES
from tests.local.test_compute_standin import BASE, BOOT_S, Cloud
from tests.agent.helpers import names_a_save
from tests.waiting import wait_for
from zen.core.checkpoints import CheckpointConfig
from zen.core.config import load_config
from zen_dev.local.compute import ComputeStandIn, ManualClock

NOTICE_BOUND_S = 30.0  # GCE's notice: from it to the VM's hard stop

# Steps until told: at ZEN_PREEMPTION_NOTICE it writes where it got to and exits; SIGTERM is ignored from
# the moment it says it is ready (READY_FILE: before that, a slow interpreter's start would die of the
# agent's SIGTERM at the notice). A rerun prints what it restored.
JOB = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: None)
open(os.environ["READY_FILE"], "a").close()
folder, notice = os.environ["ZEN_CHECKPOINT_DIR"], os.environ["ZEN_PREEMPTION_NOTICE"]
saved = os.path.join(folder, "at-notice")
if os.path.exists(saved):
    print("restored:", open(saved).read(), "ZEN_PREEMPTED=" + os.environ.get("ZEN_PREEMPTED", ""), flush=True)
    sys.exit(0)
step = 0
while not os.path.exists(notice):
    step += 1
    time.sleep(0.05)
with open(saved + ".tmp", "w") as file:
    file.write(f"step {step}")
os.replace(saved + ".tmp", saved)
print("checkpointed at the notice", flush=True)
"""


@pytest.fixture
def config(project):
    return load_config().model_copy(update={"project": project, "deadlines": DEADLINES,
                                            "checkpoints": CheckpointConfig(bucket="ckpt-bkt")})


@pytest.fixture
def cloud(tmp_path):
    standin = ComputeStandIn(BASE, clock=ManualClock(), log_dir=tmp_path / "vm-logs", preempt_notice_s=NOTICE_BOUND_S)
    yield Cloud(standin.start())
    standin.stop()


def test_the_preemption_notice_saves_the_checkpoint_in_time_and_the_rerun_restores_it(
        scheduler, agents, storage, cloud, tmp_path):
    bucket = gcs.Client().create_bucket("ckpt-bkt")
    cloud.resize(1)
    cloud.advance(BOOT_S + 1)
    (inst,) = cloud.instances()
    agent = agents.start(inst.name, STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(tmp_path / "work"),
                 ZEN_PREEMPTION_METADATA_HOST=f"{cloud.standin.endpoint}/zen-local/vms/{inst.name}")
    ready = tmp_path / "job-ready"
    scheduler.submit("spot-1", [sys.executable, "-c", JOB], checkpoint={"every": 600}, env={"READY_FILE": str(ready)})
    scheduler.wait_status("spot-1", "RUNNING")
    wait_for(ready.exists, timeout_s=30, what="the job's SIGTERM handler in place")

    noticed = time.monotonic()
    cloud.maintenance(inst)

    manifest = bucket.blob("checkpoints/4xa100-40gb/spot-1/LATEST.json")
    try:
        wait_for(lambda: names_a_save(bucket, manifest.name),
                 timeout_s=NOTICE_BOUND_S, what="the checkpoint saved after the notice")  # (not the restore's, naming none)
    except AssertionError as missing:
        said = [line["message"] for line in agent.logs()][-15:]
        raise AssertionError(f"{missing}; the job's history: {scheduler.history('spot-1')}; the agent's last "
                             f"words: {said}") from None
    assert time.monotonic() - noticed < NOTICE_BOUND_S
    assert agent.said("metadata server reports this VM preempted")  # the notice, not a signal (no VM process here)
    saved = json.loads(manifest.download_as_bytes())
    assert saved["attempt"] == 1 and [f["path"] for f in saved["files"]] == ["at-notice"]
    job = wait_for(lambda: (j := scheduler.job("spot-1")).attempt == 2 and j, 10, what="requeued")
    assert "was preempted" in [reason for _, status, reason in scheduler.history("spot-1") if status == "LOST"][0]

    agents.start("vm-b", STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(tmp_path / "work-b"))
    job = scheduler.wait_status("spot-1", "SUCCEEDED", timeout_s=30)
    assert "restored: step " in job.message and "ZEN_PREEMPTED=1" in job.message
