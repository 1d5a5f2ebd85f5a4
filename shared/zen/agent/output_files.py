"""An output file's upload (``zen.agent.staging.AttemptData.upload``): opened as the regular file listed alone, never
through a link (the agent is root: a link to a host file, another job's input or a cache entry would upload that file),
and sent, through an outage of Cloud Storage too (``send``), unless Cloud Storage could not name its object
(``unnamable``). Docs: docs/reference/messages.md (inputs, outputs).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any, BinaryIO, Callable, Protocol

from zen.core.gcs import MAX_OBJECT_BYTES
from zen.core.text import unstorable_problem

RESEND_S = (1.0, 30.0)  # an output file an outage failed is sent again after the first, doubling, at most the second
CLIENT_RETRY_S = 120.0  # the client's own retries of one request (its default), before ``send`` sends the file again


class Progress(Protocol):
    """Where an upload's outage is said (``zen.agent.staging.Progress``): since when, and what it answered."""

    unavailable: tuple[float, str] | None


class Skipped(Exception):
    """An output not uploaded: the message says why."""


def not_regular(mode: int) -> str:
    return "a symbolic link, not followed" if stat.S_ISLNK(mode) else "not a regular file"


def unnamable(relative: str, prefix: str) -> str | None:
    """Why Cloud Storage refuses to name an object ``prefix + relative`` (its names are UTF-8, without a carriage return
    or line feed, of at most 1,024 bytes), or None. Such a file is left out and the rest uploaded (``upload``): sent, it
    was refused (400), and the upload ended there, every file after it in name order lost with the work directory."""
    if unstorable_problem(relative):  # os.walk gives a name that is not UTF-8 as lone surrogates
        return "its name is not UTF-8, as Cloud Storage's must be"
    if "\r" in relative or "\n" in relative:
        return "its name holds a line break, which Cloud Storage's may not"
    if (size := len((prefix + relative).encode())) > MAX_OBJECT_BYTES:
        return f"its object's name would be {size:,} bytes, past Cloud Storage's {MAX_OBJECT_BYTES:,}"
    return None


def open_listed(path: Path, listed: os.stat_result) -> BinaryIO:
    """``path`` opened for reading without following a link (``O_NOFOLLOW``; ``O_NONBLOCK``: a fifo never
    blocks), only if it is a regular file (``fstat``) and still the file listed (device and inode: a
    folder on its way swapped for a link leads elsewhere); raises ``Skipped`` saying why not, or the ``OSError``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:  # not a link: a file it cannot open (its mode, the disk), which ``upload`` fails for
        raise exc if exc.errno != errno.ELOOP else Skipped(not_regular(stat.S_IFLNK))
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or (found.st_dev, found.st_ino) != (listed.st_dev, listed.st_ino):
        os.close(fd)
        raise Skipped(not_regular(found.st_mode) if not stat.S_ISREG(found.st_mode) else "replaced after it "
                      "was listed, not followed")
    return os.fdopen(fd, "rb")


def send(blob: Any, file: BinaryIO, size: int, content_type: str | None, progress: Progress, cancel: threading.Event,
         transient: Callable[[Exception], bool]) -> None:
    """One file uploaded, through an outage too. The client sends each request again for 120 s (5xx, 429, 408, a
    timeout, a lost connection); an error past that which is the service's (``transient``: not the job's, nor this
    VM's disk) has the file sent again after ``RESEND_S``, doubling, until it is stored or the transfer is cut
    (``cancel``: its budget, the VM's shutdown, the fence, a stop's deadline), the outage in ``progress`` meanwhile
    (the heartbeats say it): given up at the client's 120 s, an outage failed a job that exited 0 for good (a failed
    exit 0 is never retried) and its outputs went with its work directory. A refusal (403, 404, a bad name) raises."""
    from google.cloud.storage.retry import DEFAULT_RETRY  # with the client: only for jobs with outputs

    began, wait = time.monotonic(), RESEND_S[0]
    while True:
        file.seek(0)
        try:  # the name is this attempt's alone: a repeat is harmless
            blob.upload_from_file(file, size=size, content_type=content_type,
                                  retry=DEFAULT_RETRY.with_timeout(CLIENT_RETRY_S))
            progress.unavailable = None
            return
        except Exception as exc:  # noqa: BLE001 - the client's errors are many kinds
            if not transient(exc) or cancel.is_set():
                raise
            progress.unavailable = (progress.unavailable or (began, ""))[0], _short(exc)
            if cancel.wait(wait):
                raise
            wait = min(wait * 2, RESEND_S[1])


def _short(exc: BaseException) -> str:
    """What an outage answered: its HTTP status (``503 Service Unavailable``), else the error's kind and words."""
    last = getattr(exc, "cause", None) or exc  # the client's retries ran out (RetryError): the last error
    status = getattr(last, "code", None) or getattr(getattr(last, "response", None), "status_code", None)
    if isinstance(status, int) and status in HTTPStatus._value2member_map_:
        return f"{status} {HTTPStatus(status).phrase}"
    return f"{type(last).__name__}: {last}"[:120]
