"""Whether this VM's work disk still takes writes (``WorkDiskCheck``), looked at after a job's non-zero exit as its
GPUs are (``zen.agent.gpucheck.vm_fault``). A disk gone read-only (ext4's ``errors=remount-ro`` after an I/O error, a
persistent disk failing or detached) fails every job that writes its outputs, its scratch files or its HOME there, each
with its own exit code and "Read-only file system" or "Input/output error" in its output: each was the job's FAILED,
told it wrote where its container is read-only, its attempt spent. The attempt is the VM's fault instead (PREEMPTED:
requeued, no attempt spent) and the VM retires, as after three stagings in a row its disk failed (``zen.agent.limits``).

A full disk is not this check's: ``zen.agent.diskquota.DiskWatch.failed_full`` tells a job that filled it from the
VM's. The rules: docs/reference/agent.md, "checks the VM's work disk"."""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path
from typing import Callable

from zen.agent.staging import disk_fault_of

log = logging.getLogger("zen.agent")

# A disk refusing writes for no job's doing: read-only, or failing. ENOSPC and EDQUOT: a job may have filled it itself.
REFUSED = {errno.EROFS, errno.EIO}
PROBE = ".disk-probe"  # the file written, synced and removed in the work directory (the agent's pid, thread)


def write_probe(directory: Path) -> None:
    """A small file made, written, synced to the disk and removed in ``directory``; raises OSError."""
    path = directory / f"{PROBE}-{os.getpid()}-{threading.get_ident()}"  # (attempts may end at once)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, b"zen")
        os.fsync(fd)  # an I/O error of a failing disk comes at the sync
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


class WorkDiskCheck:
    """Writes a probe file in ``work_dir``, where every attempt's directory is (``write``: ``write_probe``)."""

    def __init__(self, work_dir: str | os.PathLike[str], write: Callable[[Path], None] = write_probe) -> None:
        self.work_dir, self.write = Path(work_dir), write

    def __call__(self) -> str | None:
        """Why this VM's work disk takes no writes (read-only, or an I/O error), or None: it does, or it failed
        otherwise (full, gone: not this check's)."""
        try:
            self.write(self.work_dir)
        except OSError as exc:
            if exc.errno in REFUSED:
                return disk_fault_of(exc, f"this VM's disk takes no writes ({self.work_dir})")
            log.warning("work disk probe failed", extra={"path": str(self.work_dir), "error": str(exc)})
        return None
