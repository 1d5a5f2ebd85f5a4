"""A job whose write fails for a disk full of what it did not write (docker's images, what an earlier agent or job
left on the VM): it exits non-zero, far within its share of the disk, and no running attempt holds enough for the
disk watch to stop. It was reported FAILED by its command (an attempt spent, charged to its user, its retries run on
the same disk) and the VM took the next job, which failed the same way. A job that fails while the disk is nearly
full, holding under a tenth of its share, is the VM's: requeued free (PREEMPTED, saying the disk was full), and
when no job on the VM holds the rest the VM takes no more jobs.

The job's ENOSPC is real (its write to /dev/full); the work disk's free space is the disk watch's own reading,
given here as a nearly full disk's (``DiskWatch._disk_usage``, as the disk-quota tests do).
"""

from __future__ import annotations

import os
import sys
from typing import Callable

from tests.agent.fakes import FakeTransport, confirm_claims, run_to_final
from zen.agent.agent import Agent
from zen.agent.diskquota import DiskShare, DiskWatch
from zen.agent.identity import Identity
from zen.agent.settings import AgentSettings
from zen.agent.slots import Capacity, Slots
from zen.core.models import AgentStatus, Heartbeat, StartMessage

VM = "vm-full"
IDENTITY = Identity(project="p", vm=VM, cluster="8xa100-40gb", region="us-central1", zone="us-central1-a",
                    from_environment=True)
TOTAL = 10_000_000_000  # the work disk as the watch reads it: 100 MB free, nearly full (under 1 GB)
FREE = 100_000_000
# Writes its result; the disk is full: "OSError: [Errno 28] No space left on device", exit code 1.
WRITER = "import os\nwith open('/dev/full', 'wb') as out:\n    out.write(b'x' * 65536)\n"


def start(job_id: str, command: list[str]) -> StartMessage:
    return StartMessage(job_id=job_id, attempt=1, cluster="8xa100-40gb", user_id="alice", regions=["us-central1"],
                        gpus=8, command=command)


def run_writer(tmp_path, free_bytes: int, inodes: Callable[[str], str | None] | None = None) -> tuple[Heartbeat, Agent]:
    """The writer's final report, run by an agent whose work disk has ``free_bytes`` free of ``TOTAL`` (and, given
    ``inodes``, is that short of inodes: ``DiskWatch``'s reading)."""
    settings = AgentSettings(heartbeat_s=0.2, stop_grace_s=1, poll_s=0.05, claim_timeout_s=5, claim_tries=3,
                             lease_s=10, vm_heartbeat_s=1000, work_dir=str(tmp_path / "work"),
                             disk_per_job_bytes=10_000_000, disk_look_s=0.05)
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start("writer", [sys.executable, "-c", WRITER]))
    transport.answer = confirm_claims(VM)
    agent = Agent(IDENTITY, settings, transport, local=True, slots=Slots(Capacity(gpus=8, max_jobs=1)))
    agent.disk._disk_usage = lambda path: (TOTAL, TOTAL - free_bytes, free_bytes)
    if inodes is not None:
        agent.disk._inodes = inodes

    report = run_to_final(agent, transport, "writer")
    return report, agent


def test_a_job_failing_on_a_disk_full_of_what_no_job_holds_is_requeued_and_the_vm_retires(tmp_path):
    report, agent = run_writer(tmp_path, FREE)

    assert "No space left on device" in (report.message or "")  # its own write failed for the disk
    assert report.status is AgentStatus.PREEMPTED, report.message  # the VM's: requeued free, not FAILED
    assert "disk was nearly full (100.0 MB free of 10.0 GB)" in (report.message or ""), report.message
    assert agent.pulls.blocked() is not None  # no job on it holds the rest: the VM takes no more jobs
    assert "nearly full" in (agent.pulls.blocked() or "")


def test_a_job_failing_on_its_own_while_the_disk_has_room_stays_failed(tmp_path):
    report, agent = run_writer(tmp_path, 5_000_000_000)

    assert report.status is AgentStatus.FAILED, report.message  # its disk had room: the failure is the job's
    assert report.exit_code == 1
    assert agent.pulls.blocked() is None


def test_a_job_failing_beside_the_one_that_filled_the_disk_is_requeued_and_the_vm_kept(tmp_path):
    failed, filler = tmp_path / "failed", tmp_path / "filler"
    failed.mkdir()
    filler.mkdir()
    (filler / "big.bin").write_bytes(b"x" * 2_000_000)  # a fifth of its share: the one the watch stops
    watch = DiskWatch(tmp_path, DiskShare(TOTAL, per_job_bytes=10_000_000), threaded=False,
                      disk_usage=lambda path: (TOTAL, TOTAL - FREE, FREE))
    watch.add(("failed", 1), failed)
    watch.add(("filler", 1), filler)
    retired: list[str] = []
    enospc = "OSError: [Errno 28] No space left on device"
    assert watch.failed_full(("failed", 1), "KeyError: 'lr'", retired.append) is None  # its own bug: its own failure
    said = watch.failed_full(("failed", 1), enospc, retired.append)
    assert said is not None and said.endswith("a job beside it filled it"), said
    assert retired == []  # the watch stops the filler; its directory's removal frees the disk
    assert watch.failed_full(("filler", 1), enospc, retired.append) is None  # the one that filled it: its own failure
    assert retired == []


def test_a_job_failing_beside_one_uploading_its_outputs_that_fill_the_disk_keeps_the_vm(tmp_path):
    """The neighbour's job ended and its outputs are being uploaded (``DiskWatch.ended``: no longer measured), its
    directory holding most of the disk until its removal: the job failing for that space is requeued free, and the VM,
    whose disk its removal frees, was retired as if nothing on it held the rest."""
    failed, uploading = tmp_path / "failed", tmp_path / "uploading"
    failed.mkdir()
    uploading.mkdir()
    (uploading / "out.bin").write_bytes(os.urandom(2_000_000))  # a fifth of its share (random: no disk compresses it)
    watch = DiskWatch(tmp_path, DiskShare(TOTAL, per_job_bytes=10_000_000), threaded=False,
                      disk_usage=lambda path: (TOTAL, TOTAL - FREE, FREE))
    watch.began(("failed", 1))  # on the full disk
    watch.add(("failed", 1), failed)
    watch.add(("uploading", 1), uploading)
    watch.ended(("uploading", 1))
    retired: list[str] = []
    said = watch.failed_full(("failed", 1), "OSError: [Errno 28] No space left on device", retired.append)
    assert said is not None and said.endswith("a job beside it filled it"), said  # the VM's disk: requeued free
    assert retired == []  # the upload's end frees the disk: the VM takes jobs on
    watch.remove(("uploading", 1))
    said = watch.failed_full(("failed", 1), "OSError: [Errno 28] No space left on device", retired.append)
    assert said is not None and said.endswith("this VM takes no more jobs") and retired, said  # gone: nothing holds it


def test_a_job_failing_on_a_disk_that_filled_as_it_ran_with_what_no_job_holds_stays_failed(tmp_path):
    """The disk had room as the attempt began and filled as its job ran, with what no job's directory holds: its own
    image, its container's layer or volumes as like as not (docker frees them after the container's removal, maybe
    not yet). Its failure is its own: requeued free, such a job retired VM after VM, each told of a full disk."""
    free = [5_000_000_000]
    watch = DiskWatch(tmp_path, DiskShare(TOTAL, per_job_bytes=10_000_000), threaded=False,
                      disk_usage=lambda path: (TOTAL, TOTAL - free[0], free[0]))
    (tmp_path / "job").mkdir()
    watch.began(("job", 1))
    watch.add(("job", 1), tmp_path / "job")
    free[0] = FREE  # its container filled the disk
    retired: list[str] = []
    assert watch.failed_full(("job", 1), "OSError: [Errno 28] No space left on device", retired.append) is None
    assert retired == []
