"""A job's checkpoint on the VM (its ``checkpoint:``, ``zen.core.checkpoints``): ``ZEN_CHECKPOINT_DIR`` restored from
Cloud Storage before the attempt runs, saved every ``every`` seconds (and as its objects age) in a thread of its own
(never in the heartbeat's way), and once more when the attempt ends (after a preemption's notice too: the job was
told, by ``ZEN_PREEMPTION_NOTICE`` and SIGTERM, and had its stop grace to write it).

Layout under the job's prefix (``gs://<bucket>/<prefix>/<cluster>/<job_id>/``): each save uploads its files under
``attempt-<n>/save-<k>/``, then writes ``LATEST.json``, the manifest naming that save and its files. One object's
write is atomic, so a save cut short (the VM gone, the notice's time up, a file changed while it was read) never
replaces the checkpoint before it: the manifest still names the older save, whose files are deleted only once a newer
manifest is written. The manifest is written only over the one this attempt last read or wrote
(``ifGenerationMatch``): when another attempt wrote one since, an earlier attempt's save (a lost attempt's, still
running until its fence falls) is dropped, a later one's written over it; so a rerun never finds an older attempt's
checkpoint over a newer one's. Restoring reads the manifest, then its files, then writes the manifest again as this
attempt's (over the one it read; none, or one whose files are gone: a ``claim``, naming no save): from then on an
earlier attempt's save is dropped, and one that landed meanwhile is restored instead. A failed save says which stays the
latest (``checkpoint_objects.later``). No listing: the agents' accounts need object rights on their cluster's prefix
alone (terraform/checkpoints.tf). Once the attempt has ended (``close``) no save writes the manifest (one cut or waiting
is dropped), so what the final report says stays true. Limits and what happens past them: docs/how-to/checkpoints.md.
Its parts: the restore's downloads and failures (``checkpoint_restore``), a save's uploads (``checkpoint_upload``), the
manifest's generation-matched writes (``checkpoint_manifest``)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

from zen.agent import checkpoint_files, checkpoint_objects, checkpoint_restore, checkpoint_upload
from zen.agent.checkpoint_files import Listing
from zen.agent.checkpoint_manifest import Manifest
from zen.agent.checkpoint_objects import CLAIMED, SUPERSEDED
from zen.agent.checkpoint_upload import Changed
from zen.agent.limits import token_refused
from zen.agent.staging import Cancelled, Progress, TransferError, Unavailable, disk_fault_of, reason
from zen.core.checkpoints import StartCheckpoint
from zen.core.gcs import split_uri
from zen.core.text import human_bytes

MANIFEST = "LATEST.json"
CLOSE_WAIT_S = 2.0  # the attempt's end waits this long for a manifest being written (a small object)
NOTICE = "preempted"  # the file that appears in the notice folder when the VM is about to go away
AFRESH = "no checkpoint was saved: the next attempt starts afresh"  # a save not made, where none was before
# The end of the note of a save refused for a later attempt's (not "kept" nor AFRESH: checkpoint_objects.later).
LATER = (SUPERSEDED, CLAIMED)


class Checkpoint:
    """One attempt's checkpoint: ``prepare``, ``restore``, ``start_periodic``, ``notice``, ``save``, ``close``.
    ``say`` writes a line to the job's output (``zen logs``); ``notes`` keeps what went wrong, for the final report."""

    def __init__(self, spec: StartCheckpoint, root: Path, attempt: int, client: Callable[[], Any],
                 say: Callable[[str], None] = lambda line: None, node: int | None = None) -> None:
        """``node``: a gang's node's rank; each node keeps its own checkpoint, ``node-<rank>/`` of the job's
        (the nodes' files, named alike or not, and their manifests never overwrite each other's)."""
        self.spec = spec if node is None else spec.model_copy(update={"uri": f"{spec.uri}node-{node}/"})
        self.disk_fault: str | None = None  # why a restore failed by this VM's disk: retires it, as stagings do
        # Why it failed by this VM's own token (limits.token_refused): as disk_fault.
        self.token_fault: str | None = None
        self.directory, self.notice_path = root / "checkpoint", root / "notice" / NOTICE
        self.attempt, self._client, self._say = attempt, client, say
        self.notes = list[str]()
        self._failed = set[str]()  # notes of saves that failed, dropped once one lands
        self.saved = Progress()  # the last save's (one object, restarted by each save)
        self.saves = 0  # saves written
        self.latest_why: str | None = None  # why the newest save this attempt wrote was made (None: none yet)
        self._bucket_name, self._prefix = split_uri(self.spec.uri)  # a node's: node-<rank>/ of the job's
        self._lock = threading.Lock()  # one save at a time
        # The files and empty folders as last saved or restored: unchanged, not saved again.
        self._last: Listing | None = None
        self._current: list[str] = []  # the objects of the save the manifest names
        self._held: checkpoint_objects.Held = {}  # what holds each file as last saved or restored (checkpoint_objects)
        self._latest = Manifest(self._bucket, self._prefix, self._prefix + MANIFEST, attempt)  # and its generation
        self._seq = 0
        self._stop = threading.Event()  # ends the periodic saves, and cuts the one under way
        self._writing = threading.RLock()  # a manifest being written and recorded (``close`` waits)
        self._closed = False
        self._thread: threading.Thread | None = None
        self._left_out = set[str]()  # files whose names no object may have, said once

    @property
    def kept(self) -> bool:
        """A checkpoint the next attempt restores: one this attempt restored or saved."""
        return self._last is not None

    def left(self, kept: str = "the previous one is kept") -> str:
        """What a save not made leaves (the manifest read: failure paths only): a later attempt's manifest, which
        stays (a lost attempt's save failed as its rerun saved: "kept" was false), else this attempt's save before
        (``kept``) or none (``AFRESH``)."""
        return checkpoint_objects.latest_words(self._bucket, self._prefix + MANIFEST, self.attempt) or (
            kept if self.kept else AFRESH)

    def env(self) -> dict[str, str]:
        return {"ZEN_CHECKPOINT_DIR": str(self.directory), "ZEN_PREEMPTION_NOTICE": str(self.notice_path)}

    def prepare(self) -> None:
        """The folders, empty; the checkpoint's writable by the job's container (it runs as nobody)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.directory.chmod(0o777)
            self.notice_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.disk_fault = disk_fault_of(exc, f"cannot prepare {self.directory}")
            raise Unavailable(f"cannot prepare {self.directory}: {exc}") from None

    def notice(self) -> None:
        """The VM is about to go away: ``ZEN_PREEMPTION_NOTICE`` appears (the job should checkpoint now), and no
        periodic save begins (they went on through the stop grace, taking the job's notice-time write half done)."""
        self._stop.set()
        try:
            self.notice_path.write_text(f"{time.time():.3f}\n")
        except OSError:
            pass

    # -- restore ---------------------------------------------------------------------------------
    def restore(self, progress: Progress, cancel: threading.Event, refused_until: float | None = None) -> None:
        """Download the latest complete checkpoint into the folder, and make the manifest this attempt's (none: the
        folder stays empty); another save landing meanwhile is restored. ``progress``: its own (never the inputs').
        A refusal (403: an IAM grant propagating) is asked again every ``REFUSED_WAIT_S`` for ``REFUSED_FOR_S``, then
        fails the attempt saying so (one for good, a prefix no grant covers, is no VM's fault: requeued, all met it);
        another 4xx but 401, 404, 408, 429 (a 400: the bucket made requester pays) at once. 5xx, the network, this
        VM's own token refused (401, or not had: ``token_fault``, counted as staging's toward retiring the VM):
        ``Unavailable``. What each failure is: ``zen.agent.checkpoint_restore``."""
        progress.restart()
        if refused_until is None:
            refused_until = time.monotonic() + checkpoint_restore.REFUSED_FOR_S
        try:
            gone: tuple[int | None, str] | None = None  # (the manifest's generation, a file of it not found)
            for _ in range(checkpoint_restore.RESTORE_TRIES):
                manifest = self._manifest()
                # A file the same manifest named was not found again: gone for good.
                lost = gone[1] if gone is not None and gone[0] == self._latest.generation else None
                # None, or a claim: no save (its own, or a lost one's).
                if manifest is None or "generation" not in manifest or lost is not None:
                    # An earlier attempt's save is refused from now on.
                    if not self._take_over(checkpoint_objects.claim_over(manifest, self.attempt)):
                        continue  # a save landed since the manifest was read: restored instead
                    if lost is None:
                        self._say("zen: no checkpoint saved yet: the job starts afresh")
                    else:
                        self.note(f"checkpoint file {lost} is gone (a checkpoint's objects are deleted "
                                  f"checkpoint_retention_days after they were written): the job starts afresh")
                    return
                missing = checkpoint_restore.download(self._bucket(), self._prefix, self.directory, manifest,
                                                      progress, cancel)
                if missing is None and self._take_over(manifest):
                    break
                gone = None if missing is None else (self._latest.generation, missing)
                self._empty()  # another attempt's save replaced the one read: restored again, from its manifest
                progress.files = progress.bytes = 0
            else:
                tries = checkpoint_restore.RESTORE_TRIES
                raise Unavailable(f"the checkpoint changed {tries} times while it was restored")
            for folder, _, _ in os.walk(self.directory):
                os.chmod(folder, 0o777)
            self._current = checkpoint_objects.objects_of(self._prefix, manifest)
            self._last = self.files()
            self._held = checkpoint_objects.held_by(manifest, self._last.files)
            self._say(checkpoint_restore.restored(manifest))
        except TransferError:
            raise
        except Exception as exc:  # noqa: BLE001 - the client's errors are many kinds
            where = f"checkpoint {self.spec.uri}"
            if checkpoint_restore.unreadable(exc):
                raise TransferError(f"{where}{MANIFEST} cannot be read: {exc!r}") from None
            self.disk_fault = disk_fault_of(exc, where)  # one VM disk failing every restore
            self.token_fault = f"{where}: {reason(exc)}" if token_refused(exc) else None  # as staging's
            if checkpoint_restore.refused(exc) and time.monotonic() < refused_until:
                wait_s = checkpoint_restore.REFUSED_WAIT_S
                self._say(f"zen: checkpoint restore refused ({reason(exc)}): asked again in {wait_s:g} s")
                if cancel.wait(wait_s):
                    raise Cancelled("cancelled") from None
                self._empty()
                return self.restore(progress, cancel, refused_until)
            raise checkpoint_restore.failure(exc, where) from None

    def _take_over(self, manifest: dict[str, Any]) -> bool:
        """The manifest read, written again as this attempt's (over that very one): an earlier attempt's save,
        still under way, is dropped from now on. False when another save landed since (restore it instead)."""
        owner = manifest.get("attempt")
        if isinstance(owner, int) and owner >= self.attempt:
            if owner > self.attempt:  # this attempt is an earlier one, still running until its fence falls
                self._closed, done = True, "saved its checkpoint" if "generation" in manifest else "started"
                self._say(f"zen: attempt {owner} of the job {done} since: this attempt saves none")
            return True
        saved_by = manifest.get("saved_by", manifest.get("attempt"))
        return self._latest.write({**manifest, "attempt": self.attempt, "saved_by": saved_by})

    def _empty(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        self.prepare()

    def _manifest(self) -> dict[str, Any] | None:
        return self._latest.read()

    # -- save ------------------------------------------------------------------------------------
    def files(self) -> Listing:
        """Every regular file under the folder that an object may hold, and its empty folders (``checkpoint_files``)."""
        own = f"{self._prefix}attempt-{10 ** 6}/save-{10 ** 9}/"  # as wide as any save's: every one leaves out the same
        return checkpoint_files.listing(self.directory, self._left_out, self.note,
                                        checkpoint_files.MAX_OBJECT_NAME - len(own.encode()))

    def save(self, why: str, cancel: threading.Event | None = None) -> bool:
        """Upload the folder as the latest checkpoint, when it changed since the last save or restore (or an object
        holding a file nears the lifecycle's age: ``checkpoint_objects.aging``) and fits ``max_bytes``; True when a
        new checkpoint was written. Cut (``cancel``) or failed: the one before stays; raises ``TransferError``."""
        cancel = cancel or threading.Event()
        with self._lock:
            if self._closed or not self.directory.is_dir():  # the attempt has ended: its report said what was saved
                return False
            try:
                listed = self.files()
                # Made or replaced in a folder listed before (after) it was: a state never there.
                if self.files() != listed:
                    raise Changed(f"checkpoint not saved ({why}): the folder changed while it was listed; "
                                  f"{self.left()}")
            # Unreadable: a save without it lost it.
            except (checkpoint_files.Vanished, checkpoint_files.Unreadable) as gone:
                failed = Changed if isinstance(gone, checkpoint_files.Vanished) else TransferError
                raise failed(f"checkpoint not saved ({why}): {gone}; {self.left()}") from None
            unchanged = listed == self._last and not checkpoint_objects.aging(self._held, time.time())
            if unchanged or (not listed and self._last is None):
                return False
            files = listed.files
            total = sum(size for size, _, _ in files.values())
            if total > self.spec.max_bytes:
                raise TransferError(f"checkpoint not saved ({why}): ZEN_CHECKPOINT_DIR holds {human_bytes(total)}, "
                                    f"above the limit of {human_bytes(self.spec.max_bytes)}; {self.left()}")
            self._seq, now = self._seq + 1, time.time()
            generation = f"attempt-{self.attempt}/save-{self._seq}/"
            kept = checkpoint_objects.reusable(self._held, files, now)  # unchanged since their objects were written
            uploaded, written = list[str](), False  # written: its manifest's write begun (it may have landed)
            self.saved.restart()
            try:
                changed = {path: listed_as for path, listed_as in files.items() if path not in kept}
                checkpoint_upload.upload(self._bucket(), self.directory, changed, self._prefix + generation, uploaded,
                                         lambda: cancel.is_set() or self._closed, self.saved)
                entries = checkpoint_objects.items(files, kept, generation, now)
                manifest = {"generation": generation, "attempt": self.attempt, "reason": why, "saved_at": now,
                            "files": entries, "folders": list(listed.folders), "folder_times": listed.times}
                written = True
                # (Reentrant) held until the save is recorded: ``close`` then tells one landed as saved.
                with self._writing:
                    overwritten = self._write(manifest, cancel)
                    named = checkpoint_objects.objects_of(self._prefix, {"files": entries})
                    before = list(set(self._current + overwritten) - set(named))  # the save before's, not named again
                    self._current, self._last = named, listed
                    self._held = checkpoint_objects.held_by({"files": entries}, files)
                    self.saves, self.latest_why = self.saves + 1, why
                    # The failed saves' notes are no longer the latest word.
                    self.notes = [n for n in self.notes if n not in self._failed]
                    self._failed = set()
            except BaseException as exc:
                # An incomplete save's files go, unless a manifest may name them. Cut (no time), or its manifest's
                # write unanswered (a timeout: it may land yet): left to the lifecycle. Refused (412), it may have
                # landed first and a later attempt taken it over (``_take_over``): what the manifest names stays.
                latest = checkpoint_objects.named(self._bucket, self._prefix, MANIFEST) if written else set()
                given_up = written and not isinstance(exc, TransferError)  # no answer: that write may land yet
                if not (cancel.is_set() or self._closed or given_up) and latest is not None:
                    checkpoint_objects.delete(self._bucket, [n for n in uploaded if n not in latest])
                if isinstance(exc, TransferError):  # (refused for a later attempt's save: that one is what is left)
                    left = "" if str(exc).endswith(LATER) else f"; {self.left()}"
                    raise type(exc)(f"checkpoint not saved ({why}): {exc}{left}") from None
                if isinstance(exc, Exception):
                    raise TransferError(f"checkpoint not saved ({why}): {reason(exc)}; {self.left()}") from None
                raise
            finally:
                self.saved.ended = time.monotonic()
        self._say(f"zen: checkpoint saved ({why}): {self.saved.describe()}" + (
            f"; {len(kept)} unchanged file(s) kept from the save before" if kept else ""))
        # The save before's objects: deleted outside the lock, so the next save need not wait for it.
        checkpoint_objects.delete(self._bucket, before)
        return True

    def _write(self, manifest: dict[str, Any], cancel: threading.Event) -> list[str]:
        """The manifest, over the one last read or written only; another attempt's written since: over it when that
        attempt is an earlier one (returns the objects of that save, for deletion), else this save is dropped
        (``TransferError``). Cut, or the attempt ended (``close``), before it starts: dropped; but a periodic save whose
        every file is up when ``stop_periodic`` comes still lands (its files are whole, and at a preemption's notice it
        may be the newest checkpoint there is time for: dropped, the rerun restored the one before it)."""
        with self._writing:
            if self._closed or (cancel.is_set() and cancel is not self._stop):
                raise Cancelled("cut before its manifest was written")
            return self._latest.write_over(manifest)

    def _bucket(self) -> Any:
        return self._client().bucket(self._bucket_name)

    # -- periodic saves ----------------------------------------------------------------------------
    def start_periodic(self) -> None:
        def run(tried: bool = False) -> None:  # every ``every`` s, and as an object holding a file ages (next_save_in)
            while not self._stop.wait(checkpoint_objects.next_save_in(self._held, self.spec.every, time.time(), tried)):
                self._quietly(f"every {self.spec.every} s", self._stop)
                tried = True

        self._thread = threading.Thread(target=run, name="zen-checkpoint", daemon=True)
        self._thread.start()

    def stop_periodic(self, wait_s: float = 1.0) -> None:
        """No more periodic saves; one under way is cut at its next file (one whose files are all up writes its
        manifest) and waited for ``wait_s`` at most."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(wait_s)

    def close(self, wait_s: float = CLOSE_WAIT_S) -> bool:
        """The attempt has ended: no save writes the manifest any more (one under way is cut, one waiting does
        nothing; one landed is recorded first). False when a manifest being written did not end within ``wait_s``:
        the latest is that save or the one before."""
        self._stop.set()
        written, self._closed = self._writing.acquire(timeout=wait_s), True
        if written:
            self._writing.release()
        else:
            self.note("a checkpoint save was writing its manifest as the attempt ended: the latest checkpoint is "
                      "that save's or the one before")
        return written

    def _quietly(self, why: str, cancel: threading.Event) -> None:
        try:
            self.save(why, cancel)
        except TransferError as exc:
            if not isinstance(exc, Cancelled) and not cancel.is_set():
                self.note(str(exc), failed=True)
        except Exception as exc:  # noqa: BLE001 - a periodic save never ends the attempt
            self.note(f"checkpoint not saved ({why}): {exc!r}; {self.left()}", failed=True)

    def note(self, text: str, failed: bool = False) -> None:
        """Said in the job's output, and kept for the final report (a save's failure, ``failed``, until a save
        lands)."""
        self.notes.append(text)
        if failed:
            self._failed.add(text)
        self._say(f"zen: {text}")
