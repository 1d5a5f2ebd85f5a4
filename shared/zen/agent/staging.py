"""A job's data on the VM: its ``inputs`` staged into ``ZEN_INPUT_DIR`` before it runs (from the warm cache,
``zen.agent.cache``, when it holds them), and ``ZEN_OUTPUT_DIR`` uploaded to its ``outputs`` after it ends, with the
official Cloud Storage client, under ``<work dir>/<attempt name>/`` (locked while in use), with ``ZEN_SCRATCH_DIR``
(every attempt's, never uploaded). Transfers run in a worker thread so the agent keeps heartbeating; ``cancel`` stops
them. Layout and failures: docs/reference/messages.md (inputs, outputs) and docs/reference/agent.md"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import math
import mimetypes
import os
import re
import shutil
import stat
import threading
import time
from dataclasses import dataclass, field
from http.client import HTTPException  # a response cut short: the service's fault (_not_the_jobs)
from pathlib import Path
from typing import Any, Callable

from zen.agent.cache import InputCache, object_key
from zen.agent.limits import token_refused
from zen.agent import output_manifest as manifest
from zen.agent.progress import Progress  # (also imported from here)
from zen.agent.output_files import Skipped, not_regular, open_listed, send, unnamable
from zen.agent.runner import attempt_name
from zen.agent.workdir import lock_unheld
from zen.core.gcs import NOT_WHOLE, WHOLE, input_name, output_destination, split_uri
from zen.core.models import AgentStatus, InputSpec
from zen.core.text import escape_unstorable, human_bytes

SKIPPED_NAMED = 5  # outputs not uploaded (not regular files) named in the final report, at most


class TransferError(Exception):
    """Staging or uploading failed; the message is the reason the attempt reports."""


class Cancelled(TransferError):
    pass


class Unavailable(TransferError):
    """Staging failed by the VM's or the service's fault, not the job's (reported PREEMPTED): its disk (ENOSPC,
    EIO), the network, Cloud Storage (5xx, 429: after the client's retries), its credentials, a replaced object."""


_JOBS_ERRNOS = {errno.ENAMETOOLONG, errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.EILSEQ, errno.EINVAL}
DISK_ERRNOS = {errno.EIO, errno.EROFS, errno.ENOSPC, errno.EDQUOT}  # this VM's disk: failing, read-only or full


def disk_fault_of(exc: BaseException, what: str) -> str | None:
    """Why ``what`` failed by this VM's disk, if ``exc`` says so (``AttemptData.disk_fault``, a checkpoint's)."""
    return f"{what}: {exc}" if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS else None


def _not_the_jobs(exc: BaseException) -> bool:
    """Whether a staging error is the VM's or the service's (``Unavailable``) rather than the job's."""
    if isinstance(exc, OSError):  # the VM's disk, or the network (requests' errors are OSErrors)
        return exc.errno not in _JOBS_ERRNOS  # those: names this filesystem cannot hold, or that clash
    code = getattr(exc, "code", None)  # google.api_core's errors: the HTTP status
    if isinstance(code, int):
        return code in (401, 408, 429) or code >= 500  # 400 (a bad name), 403, 404...: the job's
    from google.api_core.exceptions import RetryError  # the client's retries ran out of time
    from google.auth.exceptions import GoogleAuthError  # the VM's credentials
    from google.cloud.storage.exceptions import DataCorruption, InvalidResponse
    return isinstance(exc, (RetryError, GoogleAuthError, DataCorruption, InvalidResponse, HTTPException))


def _reason(exc: BaseException) -> str:
    """A short reason from a client error: the API's own message when the response carries one."""
    found = re.search(r'"message":\s*"((?:[^"\\]|\\.)*)"', text := str(exc))
    code = getattr(exc, "code", None)
    if found:
        return f"{code} {found[1]}" if isinstance(code, int) else found[1]
    return (text or type(exc).__name__)[:500]


class CountingWriter:
    """A file the client downloads into: counts the bytes, and stops the download when cancelled."""

    def __init__(self, file, progress: Progress, cancel: threading.Event):
        self._file, self._progress, self._cancel = file, progress, cancel

    def write(self, data: bytes) -> int:
        if self._cancel.is_set():
            raise Cancelled("cancelled")
        self._progress.bytes += len(data)
        return self._file.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


@dataclass
class AttemptData:
    """The inputs and outputs of one attempt, and their directories on this VM."""

    job_id: str
    attempt: int
    inputs: list[InputSpec]
    outputs: str | None
    work_dir: Path
    project: str | None = None
    client_factory: Callable[[], Any] | None = None  # tests may pass one; default: storage.Client
    cache: InputCache | None = None  # the VM's warm cache: hits are not downloaded again
    node: int | None = None  # a gang's node: its rank (its outputs go to node-<rank>/ of the attempt's)
    share: Any = None  # the job's share of the VM's disk (zen.agent.diskquota.DiskShare), if the agent keeps one
    scratch_only: bool = False  # a job given no inputs, outputs nor checkpoint: its ZEN_SCRATCH_DIR alone
    staged: Progress = field(default_factory=Progress)
    uploaded: Progress = field(default_factory=Progress)
    cancel: threading.Event = field(default_factory=threading.Event)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # outputs not uploaded: (path, why)
    unlisted: list[str] = field(default_factory=list)  # outputs that could not be read (path and why)
    disk_fault: str | None = None  # why staging failed by this VM's disk (zen.agent.limits.DailyPulls.staged)
    token_fault: str | None = None  # why it failed by this VM's own credentials (limits.token_refused): as disk_fault
    written: bool = False  # the outputs' manifest is stored: every file went up (zen.agent.output_manifest)
    _needed: int = 0  # bytes of the objects staged so far, against the disk's size
    _held: int | None = None  # the attempt's directory, open and locked while in use (zen.agent.agent sweeps)
    _client: Any = None

    @property
    def root(self) -> Path:
        """The attempt's directory; a gang's node's its own (the local stack's VMs share one work directory, and
        two nodes of one attempt there wiped, read and removed each other's inputs, outputs and checkpoint)."""
        node = "" if self.node is None else f"-node-{self.node}"
        return self.work_dir / f"{attempt_name(self.job_id, self.attempt)}{node}"

    @property
    def input_dir(self) -> Path:
        return self.root / "inputs"

    @property
    def output_dir(self) -> Path:
        return self.root / "outputs"

    @property
    def scratch_dir(self) -> Path:  # every attempt's, on the VM's disk (not /tmp's memory): never uploaded
        return self.root / "scratch"

    def env(self) -> dict[str, str]:  # ZEN_SCRATCH_DIR: its container's HOME too (zen.agent.container)
        data = {} if self.scratch_only else {"ZEN_INPUT_DIR": str(self.input_dir), "ZEN_OUTPUT_DIR": str(self.output_dir)}
        return {**data, "ZEN_SCRATCH_DIR": str(self.scratch_dir)}

    def prepare(self) -> None:
        """Fresh, empty directories, locked (``flock``) until ``cleanup``: made as ``<name>.new`` and renamed
        once locked, so an agent starting (it sweeps unlocked attempts' directories) never takes one."""
        try:
            for path in (self.root, new := self.root.with_name(self.root.name + ".new")):
                shutil.rmtree(path, ignore_errors=True)
            new.mkdir(parents=True)
            self._held = os.open(new, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            fcntl.flock(self._held, fcntl.LOCK_EX)
            new.rename(self.root)
            for path in (() if self.scratch_only else (self.input_dir, self.output_dir)) + (self.scratch_dir,):
                path.mkdir()
                if path != self.input_dir:  # the job's container runs as nobody (zen.agent.container); inputs: read-only
                    path.chmod(0o777)
        except OSError as exc:
            self.disk_fault = f"cannot prepare {self.root}: {exc}"
            raise Unavailable(self.disk_fault) from None

    def reopen(self) -> bool:
        """Lock the directory an agent of this VM that died left (its job ended: ``zen.agent.resume``), as ``prepare``
        does, so the work-dir sweep leaves it; False when it is gone or a live agent holds it."""
        self._held = lock_unheld(self.root)
        return self._held is not None

    def release(self) -> None:
        """Unlock the directory, leaving it (the work-dir sweep removes it)."""
        if self._held is not None:
            os.close(self._held)
            self._held = None

    def cleanup(self) -> None:
        """The directory removed and unlocked, and the Cloud Storage client's connections closed (left to the garbage
        collector, each attempt's sockets stayed open until a full collection: a VM of short jobs piled them up)."""
        shutil.rmtree(self.root, ignore_errors=True)
        self.release()  # the lock goes with it
        with contextlib.suppress(Exception):  # kept: a transfer cut short, still running, connects anew
            getattr(self._client, "close", lambda: None)()

    def client(self):
        if self._client is None:
            try:
                if self.client_factory is not None:
                    self._client = self.client_factory()
                else:
                    import google.cloud.storage as storage  # heavy: only for jobs with data
                    self._client = storage.Client(project=self.project)
            except Exception as exc:  # noqa: BLE001 - e.g. no credentials
                raise Unavailable(f"no Cloud Storage client: {_reason(exc)}") from None
        return self._client

    def destination(self) -> str | None:
        """``gs://bucket/prefix/<job_id>/attempt-<n>/`` (a gang's node: ``.../node-<rank>/``): ``ZEN_OUTPUT_DIR``'s."""
        if self.outputs is None:
            return None
        return output_destination(self.outputs, self.job_id, self.attempt, self.node)

    # -- staging ---------------------------------------------------------------------------------
    def stage(self) -> None:
        """Download every input into ``input_dir``; raises ``TransferError`` naming the input (``Unavailable``)."""
        self.staged.started = time.monotonic()
        disk = shutil.disk_usage(self.input_dir).total if self.input_dir.is_dir() else math.inf  # all it could hold
        try:
            for spec in self.inputs:
                try:
                    self._stage_one(spec.uri, disk)
                except TransferError as exc:
                    raise type(exc)(f"input {spec.uri}: {exc}") from None
                except Exception as exc:  # noqa: BLE001 - the client's errors are many kinds
                    kind, why = Unavailable if _not_the_jobs(exc) else TransferError, f"input {spec.uri}: {_reason(exc)}"
                    self.disk_fault = disk_fault_of(exc, f"input {spec.uri}") or self.disk_fault
                    self.token_fault = why if token_refused(exc) else None
                    raise kind(why) from None
        finally:
            self.staged.ended = time.monotonic()

    def _stage_one(self, uri: str, disk: float) -> None:
        bucket_name, path = split_uri(uri)
        client = self.client()
        bucket = client.bucket(bucket_name)
        target = self.input_dir / input_name(uri)
        keys: set[str | None] = set()
        if path and not path.endswith("/"):
            blob = bucket.get_blob(path)
            if blob is not None:
                keys.add(self._download(blob, target, disk))
                if self.cache is not None:
                    self.cache.staged(uri, keys)
                return
        prefix = f"{path.rstrip('/')}/" if path.strip("/") else ""
        found = placeholders = 0
        for blob in client.list_blobs(bucket_name, prefix=prefix):
            relative = blob.name[len(prefix):]
            if relative.endswith("/") or not relative:
                placeholders += 1  # a folder placeholder: no file; the prefix counts as empty without others
                continue
            parts = relative.split("/")
            if any(part in ("", ".", "..") for part in parts):
                raise TransferError(f"object {blob.name} cannot be staged as a file (empty, '.' or '..' in its path)")
            keys.add(self._download(blob, target.joinpath(*parts), disk))
            found += 1
        if not found:
            only = f" (only {placeholders} folder placeholder{'s' * (placeholders > 1)})" if placeholders else ""
            raise TransferError(f"no such object, and no object under it as a prefix{only}")
        if self.cache is not None:
            self.cache.staged(uri, keys)

    def _download(self, blob, target: Path, disk: float = math.inf) -> str | None:
        """Stage one object (from the cache when it holds it); returns its cache key (None: not kept). Inputs that
        need more than the whole disk (``disk`` bytes), or than the job's share of it (``share``), fail as the job's."""
        if self.cancel.is_set():
            raise Cancelled("cancelled")
        self._needed += blob.size or 0
        if self._needed > disk:
            raise TransferError(f"the inputs need more than this VM's disk holds in all ({human_bytes(int(disk))}): "
                                f"{human_bytes(self._needed)} up to {blob.name}")
        if self.share is not None and self._needed > self.share.quota_bytes:  # it would be stopped once it ran
            raise TransferError(f"the inputs need more than {self.share.describe()}: {human_bytes(self._needed)} up "
                                f"to {blob.name}; {self.share.advice()}")
        target.parent.mkdir(parents=True, exist_ok=True)
        if self.cache is None:
            self._fetch(blob, target)
        elif self.cache.fetch(blob, target, lambda path: self._fetch(blob, path), self.cancel.is_set):
            self.staged.cached_bytes += blob.size
        self.staged.files += 1
        return object_key(blob) if self.cache is not None else None

    def _fetch(self, blob, target: Path) -> None:
        with open(target, "wb") as file:
            try:
                blob.download_to_file(CountingWriter(file, self.staged, self.cancel))
            except Exception as exc:
                if getattr(exc, "code", None) == 404:  # the generation listed is gone: replaced or deleted since
                    raise Unavailable(f"object {blob.name} changed while it was staged (generation "
                                      f"{blob.generation} is gone)") from None
                raise

    # -- uploading -------------------------------------------------------------------------------
    def output_files(self) -> list[tuple[str, Path, os.stat_result]]:
        """(path under ZEN_OUTPUT_DIR, file, its lstat) for every regular file, in name order. Nothing else is followed
        or uploaded (why: ``zen.agent.output_files``): each link (to a file or a folder) and special file is ``skipped``."""
        files: list[tuple[str, Path, os.stat_result]] = []
        self.skipped, self.unlisted = [], []  # unlisted: what could not be read (upload fails: outputs incomplete)
        if self.output_dir.is_symlink():
            self.skipped.append((".", "ZEN_OUTPUT_DIR itself is a symbolic link, not followed"))
            return files
        for folder, dirs, names in os.walk(self.output_dir, onerror=lambda exc: self.unlisted.append(  # (default: none)
                f"{Path(exc.filename).relative_to(self.output_dir).as_posix()} ({exc.strerror})")):  # no link followed
            dirs.sort()
            for name in sorted(dirs + names):
                path = Path(folder, name)
                relative = path.relative_to(self.output_dir).as_posix()
                try:
                    listed = path.lstat()
                except OSError as exc:
                    self.unlisted.append(f"{relative} ({exc.strerror})")
                    continue
                if stat.S_ISREG(listed.st_mode):
                    files.append((relative, path, listed))
                elif not stat.S_ISDIR(listed.st_mode):
                    self.skipped.append((relative, not_regular(listed.st_mode)))
        return files

    def upload(self, ended: AgentStatus | None = None, exit_code: int | None = None) -> None:
        """Upload every file of ``output_dir`` under ``destination()``; raises ``TransferError``. Each file
        is opened without following a link, and only the regular file listed is sent (from the file opened):
        a file or folder the job swaps for a link after the listing is skipped too. A file it cannot read, whose name
        Cloud Storage cannot hold (``unnamable``) or is the manifest's (``set_apart``), fails the upload once the rest went
        up; else the manifest is written last (``zen.agent.output_manifest``), never once the upload is cut, saying how
        the job ended (``ended``, ``exit_code``: its outputs may be whole and the job failed all the same)."""
        self.uploaded.started = time.monotonic()
        try:
            destination = self.destination()
            files = self.output_files() if destination is not None else []
            if destination is None:
                return
            bucket_name, prefix = split_uri(destination)
            bucket = self.client().bucket(bucket_name)

            def transient(exc: Exception) -> bool:  # the service's: sent again (not the job's, nor this VM's disk)
                return _not_the_jobs(exc) and getattr(exc, "errno", None) not in DISK_ERRNOS

            files, clashed = manifest.set_apart(files)  # the job's own _ZEN_OUTPUTS.json: left out (then it fails)
            unnamed: list[str] = []  # files Cloud Storage cannot name: left out, the rest uploaded (then it fails)
            stored: list[dict[str, Any]] = []  # each file as Cloud Storage answered: the manifest's
            for relative, path, listed in files:
                if self.cancel.is_set():
                    raise Cancelled(f"upload cancelled after {self.uploaded.files} of {len(files)} files")
                if (why := unnamable(relative, prefix)) is not None:
                    unnamed.append(f"{escape_unstorable(relative)} ({why})")
                    continue
                try:
                    file = open_listed(path, listed)
                except Skipped as skipped:
                    self.skipped.append((relative, str(skipped)))
                    continue
                except OSError as exc:  # a file it may not open (one the job made 0600): the upload fails, below
                    self.unlisted.append(f"{relative} ({exc.strerror})")
                    continue
                with file:
                    size = os.fstat(file.fileno()).st_size
                    try:
                        blob = bucket.blob(prefix + relative)
                        send(blob, file, size, mimetypes.guess_type(relative)[0], self.uploaded, self.cancel, transient)
                    except Exception as exc:  # noqa: BLE001 - the client's errors are many kinds
                        raise TransferError(f"upload of {relative} to {destination}{relative} failed after "
                                            f"{self.uploaded.files} of {len(files)} files: {_reason(exc)}") from None
                stored.append(manifest.entry(relative, blob, size))
                self.uploaded.files += 1
                self.uploaded.bytes += size
            if (missing := manifest.missing(self.unlisted, unnamed, clashed, SKIPPED_NAMED)) is not None:
                raise TransferError(missing)  # after the rest went up: not all there (a job that exited 0 fails)
            if self.cancel.is_set():  # cut as the last file went up: not said whole
                raise Cancelled(f"upload cancelled after {self.uploaded.files} of {len(files)} files")
            try:
                manifest.write(bucket, prefix, manifest.body(self.job_id, self.attempt, self.node, destination, stored,
                                                           ended, exit_code, self.skipped),
                               self.uploaded, self.cancel, transient)
            except Exception as exc:  # noqa: BLE001 - the client's errors are many kinds
                raise TransferError(f"upload of {manifest.MANIFEST} to {destination} failed after all "
                                    f"{self.uploaded.files} files: {_reason(exc)}") from None
            self.written = True
        finally:
            self.uploaded.ended = time.monotonic()

    # -- reports ---------------------------------------------------------------------------------
    def heartbeat_fields(self) -> dict[str, int | float]:
        fields: dict[str, int | float] = {}
        if self.inputs and self.staged.started is not None:
            fields.update(staged_bytes=self.staged.bytes, staged_s=self.staged.seconds())
        if self.outputs and self.uploaded.started is not None:
            fields.update(uploaded_bytes=self.uploaded.bytes, uploaded_s=self.uploaded.seconds())
        return fields

    def summary(self, unsent: bool = False) -> str:
        """One line for the final report: ``zen: staged 2 files, 1.2 MB in 0.3 s; uploaded ...``. ``unsent``: the
        outputs are not uploaded at all (a job stopped over its disk share), said as not whole too: else the job's
        output right after the note could say them whole (``zen.cli.records.outputs_whereabouts``)."""
        parts = []
        if self.inputs:
            parts.append(f"staged {self.staged.describe()}")
        if self.outputs and self.uploaded.started is not None:
            parts.append(f"uploaded {self.uploaded.describe()} to {self.destination()} {WHOLE if self.written else NOT_WHOLE}")
        elif self.outputs and unsent:
            parts.append(f"nothing uploaded to {self.destination()} {NOT_WHOLE}")
        if self.skipped:
            named = ", ".join(f"{escape_unstorable(name)} ({why})" for name, why in self.skipped[:SKIPPED_NAMED])
            more = f" and {len(self.skipped) - SKIPPED_NAMED} more" if len(self.skipped) > SKIPPED_NAMED else ""
            parts.append(f"not uploaded (only regular files are): {named}{more}")
        return f"zen: {'; '.join(parts)}" if parts else ""


not_the_jobs, reason = _not_the_jobs, _reason  # for the checkpoint's transfers (zen.agent.checkpoint)
