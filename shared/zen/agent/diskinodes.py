"""Whether the VM's work disk is out of inodes (``short_of_inodes``): ext4 makes a fixed number when the disk is
formatted (one per 16 KiB by default), one per file or folder, and a disk whose inodes ran out refuses every new file
with ENOSPC, "No space left on device", whatever bytes it has free. Read by bytes alone, a job failing so for the
files docker's images or a job beside it made was FAILED by its command, an attempt spent, and the VM took the next
job, which failed the same way: ``zen.agent.diskquota.DiskWatch`` takes such a disk for a full one."""

from __future__ import annotations

import os
from typing import Callable

FULL_SHARE = 0.01  # out of inodes below this share of them free (as a job running as nobody sees it) ...
FULL_MIN = 1000  # ... or below this many


def short_of_inodes(path: str, statvfs: Callable[[str], os.statvfs_result] = os.statvfs) -> str | None:
    """How short of inodes the disk of ``path`` is, in the words of a job's final report ("out of inodes (...)"), or
    None: it has enough, has no fixed number (a file system making them as it goes says 0), or cannot say."""
    try:
        found = statvfs(path)
    except OSError:
        return None
    total, free = found.f_files, found.f_favail
    if total <= 0 or free >= max(FULL_MIN, total * FULL_SHARE):
        return None
    return f"out of inodes ({free:,} free of {total:,}: one per file or folder)"
