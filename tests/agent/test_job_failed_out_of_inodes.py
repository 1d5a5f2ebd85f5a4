"""A job whose write fails on a disk out of inodes (``zen.agent.diskinodes``): ext4 refuses every new file with
"No space left on device" once they ran out, whatever bytes it has free (docker's images, a job beside it making
millions of small files). The disk watch read bytes alone: the job was FAILED by its command, an attempt charged to its
user, and the VM took the next job, which failed the same way. It is the VM's disk, as a nearly full one is
(``tests/agent/test_job_failed_on_a_full_disk.py``): requeued free, the reason said, the VM retired.

The job's ENOSPC is real (its write to /dev/full); the disk's bytes free and inodes are the disk watch's own readings,
given here as a disk with room but no inodes' (a real ``os.statvfs_result``)."""

from __future__ import annotations

import os

from tests.agent.test_job_failed_on_a_full_disk import TOTAL, run_writer
from zen.agent.diskinodes import short_of_inodes
from zen.core.models import AgentStatus

INODES = 6_553_600  # a 100 GiB ext4 disk's, one per 16 KiB


def statvfs(free_inodes: int) -> os.statvfs_result:
    """A work disk's reading: half its bytes free, ``free_inodes`` of ``INODES`` free."""
    blocks = TOTAL // 4096
    return os.statvfs_result((4096, 4096, blocks, blocks // 2, blocks // 2, INODES, free_inodes, free_inodes, 0, 255))


def test_a_disk_is_short_of_inodes_only_below_a_hundredth_of_them_free(tmp_path):
    assert short_of_inodes(str(tmp_path)) is None  # this machine's disk has room
    assert short_of_inodes("/", statvfs=lambda path: statvfs(INODES // 50)) is None
    assert short_of_inodes("/", statvfs=lambda path: statvfs(12)) == "out of inodes (12 free of 6,553,600: one per " \
                                                                       "file or folder)"
    assert short_of_inodes("/", statvfs=lambda path: os.statvfs_result((4096,) * 5 + (0,) * 5)) is None  # none fixed


def test_a_job_failing_on_a_disk_out_of_inodes_is_requeued_and_the_vm_retires(tmp_path):
    report, agent = run_writer(tmp_path, TOTAL // 2, lambda path: short_of_inodes(path, statvfs=lambda where: statvfs(0)))

    assert "No space left on device" in (report.message or "")  # its own write failed for the disk
    assert report.status is AgentStatus.PREEMPTED, report.message  # the VM's: requeued free, not FAILED
    assert "disk was out of inodes (0 free of 6,553,600" in (report.message or ""), report.message
    assert "out of inodes" in (agent.pulls.blocked() or "")  # no job on it holds them: the VM takes no more jobs
