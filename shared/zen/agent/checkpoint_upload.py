"""A checkpoint's save uploading its files (``zen.agent.checkpoint``): each opened without following a link, and
uploaded only when it is the file listed (size, mtime, inode) and stays unchanged while it is read; otherwise the save
is dropped (``Changed``) and the checkpoint before it kept."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Callable

from zen.agent.checkpoint_files import Files
from zen.agent.staging import Cancelled, Progress, TransferError


class Changed(TransferError):
    """A file changed while it was saved: that save is dropped, the checkpoint before it kept."""


def upload(bucket: Any, directory: Path, files: Files, under: str, uploaded: list[str], cut: Callable[[], bool],
           saved: Progress) -> None:
    """``files`` (paths under ``directory``, as listed) to objects named ``under`` + path, in order; each object's
    name goes in ``uploaded`` before its upload begins. ``cut``: asked before each file (``Cancelled``)."""
    for relative in sorted(files):
        if cut():
            raise Cancelled(f"cut after {len(uploaded)} of {len(files)} files")
        path = directory / relative
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP):
                raise Changed(f"{relative} changed while it was saved") from None
            raise
        with os.fdopen(fd, "rb") as file:
            opened = os.fstat(file.fileno())
            if (opened.st_size, opened.st_mtime_ns, opened.st_ino) != files[relative]:
                raise Changed(f"{relative} changed while it was saved")
            name = under + relative
            uploaded.append(name)
            bucket.blob(name).upload_from_file(file, size=opened.st_size)
            after = os.fstat(file.fileno())
        if (after.st_size, after.st_mtime_ns) != (opened.st_size, opened.st_mtime_ns):
            raise Changed(f"{relative} changed while it was saved")
        saved.files += 1
        saved.bytes += opened.st_size
