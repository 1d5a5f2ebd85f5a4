"""A VM whose work disk went read-only as a job ran (ext4's ``errors=remount-ro`` after an I/O error, a persistent
disk failing or detached): the job's write to its outputs fails ("OSError: [Errno 30] Read-only file system") and it
exits non-zero. It was reported FAILED by its exit code (an attempt spent, charged to its user), told it wrote where
its container is read-only, and the VM went on claiming jobs, every one of its running jobs failing so. After a job's
non-zero exit the agent writes a probe file on its work disk (``zen.agent.diskcheck``): refused (EROFS, EIO), the
attempt is the VM's fault, requeued free (PREEMPTED, saying the VM's disk takes no writes), and the VM retires.

The job's failure is its own write's line; the disk's refusal is the probe's, given here as a read-only or failing
disk's (``WorkDiskCheck.write``, as the full-disk tests give the disk watch's reading).
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

from tests.agent.fakes import FakeTransport, confirm_claims, run_to_final
from zen.agent.agent import Agent
from zen.agent.diskcheck import PROBE, WorkDiskCheck
from zen.agent.identity import Identity
from zen.agent.settings import AgentSettings
from zen.agent.slots import Capacity, Slots
from zen.core.models import AgentStatus, Heartbeat, StartMessage

VM = "vm-rofs"
IDENTITY = Identity(project="p", vm=VM, cluster="8xa100-40gb", region="us-central1", zone="us-central1-a",
                    from_environment=True)
# Its write to ZEN_OUTPUT_DIR failed: the line Python prints, exit code 1.
WRITER = ("import sys\nprint(\"OSError: [Errno 30] Read-only file system: '/work/outputs/model.pt'\")\nsys.exit(1)\n")


def refused(code: int):
    def write(directory: Path) -> None:  # the work disk's answer to a write
        raise OSError(code, os.strerror(code), str(directory / PROBE))
    return write


def run_writer(tmp_path, write=None) -> tuple[Heartbeat, Agent]:
    """The writer's final report, run by an agent whose work disk answers a write as ``write`` does (None: takes it)."""
    settings = AgentSettings(heartbeat_s=0.2, stop_grace_s=1, poll_s=0.05, claim_timeout_s=5, claim_tries=3,
                             lease_s=10, vm_heartbeat_s=1000, work_dir=str(tmp_path / "work"))
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(StartMessage(job_id="writer", attempt=1, cluster="8xa100-40gb", user_id="alice",
                                     regions=["us-central1"], gpus=8, command=[sys.executable, "-c", WRITER]))
    transport.answer = confirm_claims(VM)
    agent = Agent(IDENTITY, settings, transport, local=True, slots=Slots(Capacity(gpus=8, max_jobs=1)))
    if write is not None:  # the agent's check of its work disk, whose writes are answered so
        agent.attempts.work_disk = WorkDiskCheck(settings.work_dir, write)

    report = run_to_final(agent, transport, "writer")
    return report, agent


def test_a_job_failing_on_a_read_only_disk_is_requeued_unspent_and_the_vm_retires(tmp_path):
    report, agent = run_writer(tmp_path, refused(errno.EROFS))

    assert report.status is AgentStatus.PREEMPTED, report.message  # the VM's: requeued free, not FAILED
    assert "on a VM whose disk failed: this VM's disk takes no writes" in (report.message or ""), report.message
    assert "Read-only file system" in (report.message or ""), report.message
    assert "where its container is read-only" not in (report.message or "")  # not told it was its own write
    assert "takes no writes" in (agent.pulls.blocked() or "")  # the VM takes no more jobs


def test_a_job_failing_on_a_disk_that_fails_its_writes_is_requeued_unspent_and_the_vm_retires(tmp_path):
    report, agent = run_writer(tmp_path, refused(errno.EIO))

    assert report.status is AgentStatus.PREEMPTED, report.message
    assert "Input/output error" in (report.message or ""), report.message
    assert agent.pulls.blocked() is not None


def test_a_job_failing_on_its_own_read_only_root_stays_failed(tmp_path):
    report, agent = run_writer(tmp_path)  # the work disk takes the probe: its line is of its own read-only root

    assert report.status is AgentStatus.FAILED and report.exit_code == 1, report.message
    assert agent.pulls.blocked() is None
    assert not list((tmp_path / "work").glob(f"{PROBE}*"))  # the probe's file goes


def test_the_probe_says_nothing_of_a_disk_that_takes_writes_or_is_full(tmp_path):
    assert WorkDiskCheck(tmp_path)() is None  # written, synced and removed for real
    assert list(tmp_path.iterdir()) == []
    assert WorkDiskCheck(tmp_path, refused(errno.ENOSPC))() is None  # full: DiskWatch.failed_full's to tell
    assert WorkDiskCheck(tmp_path / "absent")() is None  # no work directory: not the disk's refusal
    said = WorkDiskCheck(tmp_path, refused(errno.EROFS))()
    assert said is not None and said.startswith(f"this VM's disk takes no writes ({tmp_path}): [Errno 30]"), said
