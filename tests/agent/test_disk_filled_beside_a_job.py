"""A job failing on a disk that had room as its attempt began and filled as it ran, with what no job's directory holds
(``DiskWatch.failed_full``): alone on its VM, what filled it is its own as like as not (its image, its container's
layer or volumes). Beside another job's attempt, it may as well be that one's: the image it pulled, the layer or
volumes its container writes. Taken for the failing job's own, the job was reported FAILED (an attempt spent, charged
to its user; with one attempt, failed for good) for a neighbour's image, and the VM, full, took the next job.

The work disk's free space is the watch's own reading, given here as the disk-quota tests do (``disk_usage``).
"""

from __future__ import annotations

import sys
import threading
import time

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_job_failed_on_a_full_disk import IDENTITY, VM, WRITER, start
from zen.agent.agent import Agent
from zen.agent.diskquota import DiskShare, DiskWatch
from zen.agent.settings import AgentSettings
from zen.agent.slots import Capacity, Slots
from zen.core.models import AgentStatus, Heartbeat

TOTAL = 10_000_000_000
FULL = 100_000_000  # free: nearly full (under 1 GB)
ROOM = 5_000_000_000
ENOSPC = "OSError: [Errno 28] No space left on device"


def watch_of(tmp_path, free: list[int]) -> DiskWatch:
    return DiskWatch(tmp_path, DiskShare(TOTAL, per_job_bytes=10_000_000), threaded=False,
                     disk_usage=lambda path: (TOTAL, TOTAL - free[0], free[0]))


def begin(watch: DiskWatch, tmp_path, job: str) -> tuple[str, int]:
    (tmp_path / job).mkdir()
    watch.began((job, 1))
    watch.add((job, 1), tmp_path / job)
    return job, 1


def test_a_job_failing_on_a_disk_a_neighbour_began_on_since_is_requeued_and_the_vm_retired(tmp_path):
    free = [ROOM]
    watch = watch_of(tmp_path, free)
    job = begin(watch, tmp_path, "job")
    begin(watch, tmp_path, "neighbour")  # its image pulled, its container writing: not in its directory
    free[0] = FULL
    retired: list[str] = []
    said = watch.failed_full(job, ENOSPC, retired.append)
    assert said is not None and said.endswith("this VM takes no more jobs") and retired, said  # the VM's disk


def test_a_job_failing_on_a_disk_filled_beside_a_job_begun_before_it_is_requeued(tmp_path):
    free = [ROOM]
    watch = watch_of(tmp_path, free)
    begin(watch, tmp_path, "neighbour")  # running as the job began: its container's layer grows
    job = begin(watch, tmp_path, "job")
    free[0] = FULL
    retired: list[str] = []
    said = watch.failed_full(job, ENOSPC, retired.append)
    assert said is not None and retired, said


def test_a_job_that_ran_alone_after_its_neighbour_left_stays_failed(tmp_path):
    """A neighbour's attempt gone before the job began is no neighbour of it (its directory removed)."""
    free = [ROOM]
    watch = watch_of(tmp_path, free)
    gone = begin(watch, tmp_path, "gone")
    watch.remove(gone)
    job = begin(watch, tmp_path, "job")
    free[0] = FULL
    retired: list[str] = []
    assert watch.failed_full(job, ENOSPC, retired.append) is None and retired == []  # its own


def test_a_job_alone_on_its_vm_after_a_job_without_data_stays_failed(tmp_path):
    """Each attempt's mark as begun goes at its end, one with no directory (no inputs, outputs nor checkpoint) too:
    kept, every later attempt on the VM ran beside it, and a job whose own container filled the disk was requeued
    free and retired VM after VM."""
    marker = tmp_path / "writing"
    writer = f"open({str(marker)!r}, 'w').close()\n{WRITER}"  # its container fills the disk, then it writes
    settings = AgentSettings(heartbeat_s=0.2, stop_grace_s=1, poll_s=0.05, claim_timeout_s=5, claim_tries=3,
                             lease_s=10, vm_heartbeat_s=1000, work_dir=str(tmp_path / "work"),
                             disk_per_job_bytes=10_000_000, disk_look_s=0.05)
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start("first", [sys.executable, "-c", "pass"]))
    transport.add_start(start("writer", [sys.executable, "-c", writer]))
    transport.answer = confirm_claims(VM)
    agent = Agent(IDENTITY, settings, transport, local=True, slots=Slots(Capacity(gpus=8, max_jobs=1)))
    agent.disk._disk_usage = lambda path: (TOTAL, TOTAL - (FULL if marker.exists() else ROOM),
                                           FULL if marker.exists() else ROOM)

    def final(job: str) -> Heartbeat | None:
        return next((m for m in transport.published if isinstance(m, Heartbeat) and m.job_id == job
                     and m.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)), None)

    def probe() -> None:
        deadline = time.monotonic() + 30
        while final("writer") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        agent.request_shutdown("test over")

    threading.Thread(target=probe, daemon=True).start()
    assert agent.run() == 0
    first, report = final("first"), final("writer")
    assert first is not None and first.status is AgentStatus.SUCCEEDED
    assert report is not None and "No space left on device" in (report.message or "")
    assert report.status is AgentStatus.FAILED, report.message  # alone, on a disk that had room: its own
    assert agent.pulls.blocked() is None
