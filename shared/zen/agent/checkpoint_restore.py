"""Restoring a job's checkpoint (``zen.agent.checkpoint``): a manifest's files downloaded into the folder, and what
a failed restore is. The manifest unreadable fails the attempt; a refusal (403: an IAM grant propagating) is asked
again for ``REFUSED_FOR_S``, then fails it naming what to check; a 5xx, the network, this VM's own token refused (401,
or not had: ``zen.agent.limits.token_refused``) or a save replaced while it was read (404) gives the attempt back
(``Unavailable``); another 4xx fails it at once (a 400: the bucket made requester pays)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from zen.agent import checkpoint_files, checkpoint_objects
from zen.agent.limits import token_refused
from zen.agent.staging import Cancelled, CountingWriter, Progress, TransferError, Unavailable, not_the_jobs, reason
from zen.core.text import human_bytes

RESTORE_TRIES = 3  # restores begun again after another attempt's save replaced the one read
REFUSED_FOR_S = 120.0  # a restore refused (403: a grant propagating) is asked again this long ...
REFUSED_WAIT_S = 10.0  # ... this often


def download(bucket: Any, prefix: str, directory: Path, manifest: dict[str, Any], progress: Progress,
             cancel: threading.Event) -> str | None:
    """The manifest's files into ``directory``; the first one not found (a newer save replaced them, or expired)."""
    from google.api_core.exceptions import NotFound

    for folder in manifest.get("folders") or []:  # empty ones (a manifest from before they were kept: none)
        directory.joinpath(*checkpoint_files.parts(folder)).mkdir(parents=True, exist_ok=True)
    for item in manifest["files"]:
        if cancel.is_set():
            raise Cancelled("cancelled")
        relative, size = item["path"], int(item["size"])
        target = directory.joinpath(*checkpoint_files.parts(relative))
        target.parent.mkdir(parents=True, exist_ok=True)
        try:  # counted as it comes, and cut with the next bytes when cancelled (not once whole: a model's GBs)
            with open(target, "wb") as file:
                blob = bucket.blob(prefix + checkpoint_objects.object_of(manifest, item))
                blob.download_to_file(CountingWriter(file, progress, cancel))
        except NotFound:
            return str(relative)
        if target.stat().st_size != size:
            raise Unavailable(f"checkpoint file {relative} is {target.stat().st_size} bytes, not {size}")
        target.chmod(0o666)
        if isinstance(mtime := item.get("mtime_ns"), int):  # as saved: a job may resume from its newest file
            os.utime(target, ns=(mtime, mtime))
        progress.files += 1
    _folder_times(directory, manifest.get("folder_times") or {})
    return None


def _folder_times(directory: Path, times: dict[str, Any]) -> None:
    """Each restored folder's modification time as saved, the deepest first (a folder's own, set, leaves its
    parent's): made by the downloads, in name order, ``checkpoint-9/`` came out newer than ``checkpoint-10/``, and a
    job resuming from its newest checkpoint folder by time resumed from the older one. A folder the restore did not
    make (it held no file saved) is left alone."""
    for relative in sorted(times, key=lambda name: -name.count("/")):
        folder, mtime = directory.joinpath(*checkpoint_files.parts(relative)), times[relative]
        if isinstance(mtime, int) and not isinstance(mtime, bool) and folder.is_dir() and not folder.is_symlink():
            os.utime(folder, ns=(mtime, mtime))


def restored(manifest: dict[str, Any]) -> str:
    """The line the job's output gets once the manifest's files are restored."""
    files, saved_by = manifest["files"], manifest.get("saved_by", manifest.get("attempt"))
    size = human_bytes(sum(int(item["size"]) for item in files))
    count = f"{len(files)} file{'s' if len(files) != 1 else ''}"  # as a save's line counts them
    return (f"zen: checkpoint restored: {count}, {size} saved by attempt {saved_by} "
            f"({manifest.get('reason', 'saved')})")


def unreadable(exc: Exception) -> bool:
    """The manifest (or a file it names) is not what a save writes; some of google.auth's token refusals are
    ``ValueError``s too, and those are not."""
    return isinstance(exc, (KeyError, TypeError, ValueError)) and not token_refused(exc)


def refused(exc: Exception) -> bool:
    """Cloud Storage refused the agents' account (403): an IAM grant propagating, or one that covers no such prefix."""
    return getattr(exc, "code", None) == 403


def failure(exc: Exception, where: str) -> TransferError:
    """What a restore that failed by ``exc`` raises: ``Unavailable`` (the attempt given back, no fault of the job's)
    for a 5xx, the network, this VM's own token, or a 404 (a newer save replaced the one read); a refusal still
    there after ``REFUSED_FOR_S``, or another 4xx: ``TransferError``, the refusal naming what to check."""
    words = f"{where}: {reason(exc)}"
    if refused(exc):
        return TransferError(f"{words} (refused for {REFUSED_FOR_S:g} s: may the agents' account read and write "
                             f"this prefix? terraform/checkpoints.tf)")
    if not_the_jobs(exc) or getattr(exc, "code", None) == 404:
        return Unavailable(words)
    return TransferError(words)
