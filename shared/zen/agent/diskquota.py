"""Each running attempt's share of the VM's work disk, and which attempt is stopped when it is spent
(``DiskWatch``): docker's own per-container quota (``--storage-opt size=``) needs xfs project quotas, and
GCE images are ext4, so the agent measures instead.

- ``measure``: what an attempt's directory holds on disk (allocated blocks, so a sparse file counts what
  it wrote, not its length), by a bounded walk; ``held_deleted``: what files deleted from it that a process
  still holds open take (no walk sees them);
- ``DiskShare``: the quota of one attempt, ``ZEN_AGENT_DISK_PER_JOB_BYTES``, else the work disk's size at
  agent start x ``ZEN_AGENT_DISK_SHARE`` / ``max_jobs_per_vm``;
- ``decide``: pure, from one round of measurements: who is stopped, and the reason the user reads;
- ``DiskWatch``: one thread of the agent measuring every running attempt's directory and the disk's free
  space each ``ZEN_AGENT_DISK_LOOK_S``; a nearly full disk first empties the warm cache (``make_room``,
  ``zen.agent.cache.InputCache.give_way``); each attempt's thread asks it for a verdict (``verdict``) and stops
  its job, FAILED, with that reason (``zen.agent.attempt``); a job that fails on its own naming the disk full while
  it is nearly full and the job holds little of it failed by the VM's disk (``DiskWatch.failed_full``: requeued free,
  the VM retired when no job holds the rest, unless the job ran alone on a disk that had room as it began).
Why the agent and not the job's supervisor, the defaults, and the limits: docs/reference/agent.md#the-disk-quota
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Mapping, NamedTuple

from zen.agent.diskinodes import short_of_inodes
from zen.core.text import human_bytes

log = logging.getLogger("zen.agent.diskquota")

Key = tuple[str, int]  # (job_id, attempt), as zen.agent.slots.Key
DISK_SHARE = 0.5  # of the work disk's size, for the jobs' directories; the rest: system, images, cache
FULL_SHARE = 0.02  # the disk is nearly full below this share of it free ...
FULL_MIN_BYTES = 1_000_000_000  # ... or below this many bytes free
CULPRIT_SHARE = 0.1  # on a nearly full disk, an attempt holding less than this share of its quota is not stopped
MAX_ENTRIES = 1_000_000  # files and folders a walk counts at most; past it the attempt is stopped
# ENOSPC's and EDQUOT's words as C, Python, Go, Java and shells print them, lowercased (a job's output tail):
NO_SPACE = ("no space left on device", "disk quota exceeded", "enospc")
LOOK_S = 5.0  # between two rounds of measurements, at least
COST_SHARE = 0.1  # of one CPU, at most, the walks take: a round waits at least its own time / this


class Usage(NamedTuple):
    bytes: int  # allocated: st_blocks x 512
    entries: int  # files, folders, links... counted
    complete: bool  # False: the walk stopped at its bound on entries (``bytes`` is then a lower bound)
    deleted: int = 0  # of ``bytes``, in files deleted but still held open (``held_deleted``)


def measure(root: str | os.PathLike[str], max_entries: int = MAX_ENTRIES) -> Usage:
    """What ``root`` holds on disk: every entry's allocated blocks (``st_blocks * 512``; a hard-linked file
    once), without following links or entering another filesystem, stopping after ``max_entries``. Entries
    vanishing meanwhile are skipped: the job is writing. Never raises (a missing root holds nothing).

    Cost, measured (ext4, warm cache, a loaded 2-core machine): 100,000 one-byte files in 100 folders take
    0.27 s of CPU, 0.6 to 0.8 s of wall time (an ``lstat`` per entry: ``scandir`` gives the type, not the
    size). Hence ``COST_SHARE``: ``DiskWatch`` waits ten times a round's own time before the next, and
    ``MAX_ENTRIES`` (a walk of about 3 s of CPU) bounds one round."""
    try:
        top = os.lstat(root)
    except OSError:
        return Usage(0, 0, True)
    total, entries = top.st_blocks * 512, 0
    linked: set[tuple[int, int]] = set()
    folders = [os.fspath(root)]
    while folders:
        try:
            listing = os.scandir(folders.pop())
        except OSError:
            continue
        with listing:
            for entry in listing:
                entries += 1
                if entries > max_entries:
                    return Usage(total, max_entries, False)
                try:
                    found = entry.stat(follow_symlinks=False)
                    folder = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if found.st_nlink > 1 and not folder:
                    if (found.st_dev, found.st_ino) in linked:
                        continue
                    linked.add((found.st_dev, found.st_ino))
                total += found.st_blocks * 512
                if folder and found.st_dev == top.st_dev:  # a mount inside is another disk's
                    folders.append(entry.path)
    return Usage(total, entries, True)


DELETED = " (deleted)"  # how /proc/<pid>/fd names the file of a descriptor whose path was unlinked


def held_deleted(roots: Mapping[Key, str], proc: str = "/proc", max_entries: int = MAX_ENTRIES) -> dict[Key, int]:
    """Each attempt's bytes in files deleted from its directory that a process still holds open
    (``tempfile.TemporaryFile(dir=...)``, a log rotated away under its writer): they fill the disk, and no walk
    sees them, so a job writing one ran past its share unseen and, the disk nearly full, its neighbour holding the
    most that a walk saw was stopped instead. Found by their descriptors' paths (``/proc/<pid>/fd`` reads
    "<path> (deleted)"; a job's container binds its directories at the same paths), each file once, by the
    allocated blocks ``measure`` counts; descriptors the agent may not read are skipped, and at most
    ``max_entries`` are looked at."""
    prefixes = [(os.path.join(root, ""), key) for key, root in roots.items()]
    held: dict[Key, int] = {}
    if not prefixes:
        return held
    try:
        pids = [name for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return held
    seen: set[tuple[int, int]] = set()
    looked = 0
    for pid in pids:
        fds = os.path.join(proc, pid, "fd")
        try:
            names = os.listdir(fds)
        except OSError:  # gone, or not ours to read
            continue
        for fd in names:
            looked += 1
            if looked > max_entries:
                return held
            link = os.path.join(fds, fd)
            try:
                target = os.readlink(link)
                if not target.endswith(DELETED):
                    continue
                key = next((k for prefix, k in prefixes if target.startswith(prefix)), None)
                found = os.stat(link) if key is not None else None
            except OSError:
                continue
            if key is None or found is None or found.st_nlink or (found.st_dev, found.st_ino) in seen:
                continue  # a file still linked somewhere is a walk's to count
            seen.add((found.st_dev, found.st_ino))
            held[key] = held.get(key, 0) + found.st_blocks * 512
    return held


@dataclass(frozen=True)
class DiskShare:
    """The quota of one attempt's work directory on this VM."""

    total_bytes: int  # the work disk's size, read at agent start
    max_jobs: int = 1  # max_jobs_per_vm
    factor: float = DISK_SHARE  # ZEN_AGENT_DISK_SHARE
    per_job_bytes: int | None = None  # ZEN_AGENT_DISK_PER_JOB_BYTES: given, the quota whatever the disk

    @property
    def quota_bytes(self) -> int:
        if self.per_job_bytes is not None:
            return self.per_job_bytes
        return int(self.total_bytes * self.factor / max(1, self.max_jobs))

    def describe(self) -> str:
        """How the quota was reached, for a user reading why the job was stopped."""
        if self.per_job_bytes is not None:
            return f"its {human_bytes(self.quota_bytes)} share of this VM's disk (ZEN_AGENT_DISK_PER_JOB_BYTES)"
        return (f"its {human_bytes(self.quota_bytes)} share of this VM's disk ({human_bytes(self.total_bytes)} x "
                f"{self.factor:g} / max_jobs_per_vm {self.max_jobs})")

    def advice(self) -> str:
        if self.max_jobs > 1:
            return "write less, or run it alone on a VM (a cluster with max_jobs_per_vm 1)"
        return "write less, or run it on VMs with a larger disk (boot_disk_size_gb)"


def full_bytes(total_bytes: int) -> int:
    """Free space under which a disk of ``total_bytes`` is nearly full."""
    return int(max(FULL_SHARE * total_bytes, FULL_MIN_BYTES))


def nearly_full(free_bytes: int, total_bytes: int) -> bool:
    return free_bytes < full_bytes(total_bytes)


def decide(measured: Mapping[Key, Usage], share: DiskShare, free_bytes: int, total_bytes: int,
           stopping: Collection[Key] = ()) -> dict[Key, str]:
    """The attempts to stop now, and why (the final report's note), from one round of measurements.

    - an attempt over its quota, or whose directory holds more entries than a walk counts, is stopped;
    - when the disk is nearly full (``nearly_full``: jobs as nobody cannot write the part ext4 keeps for
      root, so ``free_bytes`` is what they may still write), the attempt holding the most is stopped, not
      whichever writes next: the one that filled it. Not while an attempt stopped earlier (``stopping``)
      still holds its directory (its removal frees the space first), nor one holding under
      ``CULPRIT_SHARE`` of its quota: something else filled the disk, and stopping it would free nothing.
    """
    quota = share.quota_bytes
    verdicts: dict[Key, str] = {}
    for key, usage in sorted(measured.items()):
        if key in stopping:
            continue
        if not usage.complete:
            verdicts[key] = (f"zen: stopped: the job's work directory holds over {usage.entries:,} files and "
                             f"folders, more than the agent measures; write fewer, larger files")
        elif usage.bytes > quota:
            verdicts[key] = (f"zen: stopped: the job's work directory reached {human_bytes(usage.bytes)}"
                             f"{_deleted(usage)}, over {share.describe()}; {share.advice()}")
    if verdicts or any(key in measured for key in stopping) or not nearly_full(free_bytes, total_bytes):
        return verdicts
    candidates = [(usage.bytes, key) for key, usage in measured.items() if usage.bytes >= CULPRIT_SHARE * quota]
    if candidates:
        held, largest = max(candidates, key=lambda pair: (pair[0], pair[1]))
        verdicts[largest] = (f"zen: stopped: this VM's disk was nearly full ({human_bytes(free_bytes)} free of "
                             f"{human_bytes(total_bytes)}) and the job's work directory, {human_bytes(held)}"
                             f"{_deleted(measured[largest])}, was the largest on it (under {share.describe()}); "
                             f"{share.advice()}")
    return verdicts


def _deleted(usage: Usage) -> str:
    return f" ({human_bytes(usage.deleted)} of it in files deleted but still held open)" if usage.deleted else ""


def disk_size(path: str | os.PathLike[str]) -> int:
    """The size of the filesystem that holds ``path``, or would once it is made (the work directory may
    not exist yet when the agent starts)."""
    where = Path(path).absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    return shutil.disk_usage(where).total


class DiskWatch:
    """Measures the directories of the attempts running (``add`` / ``remove``) in a thread of its own,
    and keeps each verdict until its attempt is removed (``verdict``). One for the agent: the full-disk
    rule compares every attempt."""

    def __init__(self, work_dir: str | os.PathLike[str], share: DiskShare, *, look_s: float = LOOK_S,
                 max_entries: int = MAX_ENTRIES,
                 disk_usage: Callable[[str], tuple[int, int, int]] = shutil.disk_usage,
                 log: logging.Logger | logging.LoggerAdapter[logging.Logger] = log, threaded: bool = True,
                 make_room: Callable[[int], int] | None = None,
                 inodes: Callable[[str], str | None] = short_of_inodes) -> None:
        self.work_dir = os.fspath(work_dir)
        self._make_room = make_room  # frees at least N bytes if it can, returns those freed: the warm cache's
        self.share = share
        self._look_s = look_s
        self._max_entries = max_entries
        self._disk_usage = disk_usage  # (total, used, free) of the work disk; tests give another disk
        self._inodes = inodes  # how short of inodes the work disk is (a full disk with bytes free), or None
        self._log = log
        self._roots: dict[Key, str] = {}
        self._ending: dict[Key, str] = {}  # ended, outputs uploading: unmeasured, space back at ``remove``
        self._full_before: set[Key] = set()  # attempts that began (``began``) on a nearly full disk
        self._beside: dict[Key, bool] = {}  # each attempt begun (``began``): whether another ran beside it since
        self._verdicts: dict[Key, str] = {}
        self._lock = threading.Lock()  # attempts' threads add, remove and ask while the watch measures
        self._wake = threading.Event()
        self._closed = not threaded  # False: no thread; the caller runs each round (``look``)
        self._thread: threading.Thread | None = None

    def add(self, key: Key, root: str | os.PathLike[str]) -> None:
        """Watch ``root``, the attempt's directory, from now until ``remove``; starts the thread at the first."""
        with self._lock:
            self._roots[key] = os.fspath(root)
            self._ending.pop(key, None)
            self._verdicts.pop(key, None)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="zen-disk-watch", daemon=True)
                self._thread.start()
        self._wake.set()  # measure it at once: a job may have been given a full directory

    def began(self, key: Key) -> None:
        """The attempt of ``key`` begins, before it wrote or pulled anything: whether the disk is nearly full now,
        and whether another attempt runs beside it from now (``failed_full``), kept until ``remove``."""
        try:
            total, _, free = self._disk_usage(self.work_dir)
            full = nearly_full(free, total) or self._inodes(self.work_dir) is not None
        except OSError:
            full = False
        with self._lock:
            if full:
                self._full_before.add(key)
            others = (self._beside.keys() | self._roots.keys() | self._ending.keys()) - {key}
            self._beside.update(dict.fromkeys(others & self._beside.keys(), True))
            self._beside[key] = bool(others)

    def remove(self, key: Key) -> None:
        """Its directory is gone (or going): no more measured, and on a full disk the next may be stopped."""
        with self._lock:
            self._roots.pop(key, None)
            self._ending.pop(key, None)
            self._full_before.discard(key)
            self._beside.pop(key, None)
            self._verdicts.pop(key, None)

    def ended(self, key: Key) -> None:
        """The attempt's job ended and its directory is only read from now on (its outputs' upload, the last
        save): no more measured, so never the one a nearly full disk stops (it writes nothing more; its space
        comes back at ``remove``): picked, nothing acted on the verdict while the neighbour writing ran on. Its
        directory still counts for ``failed_full``: what it holds is on the disk until then."""
        with self._lock:
            if (root := self._roots.pop(key, None)) is not None:
                self._ending[key] = root

    def verdict(self, key: Key) -> str | None:
        """Why the attempt must be stopped (the note of its FAILED report), or None."""
        with self._lock:
            return self._verdicts.get(key)

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    def look(self) -> dict[Key, str]:
        """One round: measure every attempt's directory and the disk, decide, keep the new verdicts (returned)."""
        with self._lock:
            roots = dict(self._roots)
        measured = {key: measure(root, self._max_entries) for key, root in roots.items()}
        for key, deleted in held_deleted(roots, max_entries=self._max_entries).items():
            usage = measured[key]
            measured[key] = usage._replace(bytes=usage.bytes + deleted, deleted=deleted)
        try:
            total, _, free = self._disk_usage(self.work_dir)
        except OSError:  # the work directory is being made, or the disk failed: the quotas still hold
            total, free = self.share.total_bytes, self.share.total_bytes
        if self._make_room is not None and nearly_full(free, total):  # what the cache holds goes before any job
            wanted = 2 * full_bytes(total) - free  # no more nearly full, with as much again to spare
            if self._make_room(wanted) > 0:
                try:
                    total, _, free = self._disk_usage(self.work_dir)
                except OSError:
                    pass
        with self._lock:
            measured = {key: usage for key, usage in measured.items() if key in self._roots}  # not removed since
            found = decide(measured, self.share, free, total, stopping=set(self._verdicts))
            self._verdicts.update(found)
        for key, reason in found.items():
            self._log.warning("stopping the job: its disk share is spent", extra={
                "job_id": key[0], "attempt": key[1], "used_bytes": measured[key].bytes,
                "entries": measured[key].entries,
                "quota_bytes": self.share.quota_bytes, "free_bytes": free, "reason": reason})
        return found

    def failed_full(self, key: Key, tail: str, retire: Callable[[str], None]) -> str | None:
        """Why the job of ``key``, which exited non-zero on its own, failed by this VM's disk rather than by itself:
        requeued free (PREEMPTED), as FAILED it spent an attempt, charged to its user for space it did not take, and
        its retries failed on the same full disk. None (its own failure) unless its output's ``tail`` names the disk
        full (``NO_SPACE``), the disk is nearly full as it ends (once the warm cache gave way) and its directory holds
        under ``CULPRIT_SHARE`` of its quota. Then, when another attempt's directory holds that much (running, or
        ended with its outputs uploading: ``ended``), a job beside it filled the disk (stopped by ``decide``, or
        freed at its ``remove``): the VM is kept. When none does, nothing frees the disk: ``retire`` is called too
        (the VM takes no more jobs, else each job it claimed failed the same way), unless the disk had room as the
        attempt began (``began``) and no other attempt ran beside it since: then what filled it is the job's own as
        like as not (its image, its container's layer or volumes, maybe not freed yet by docker): its own failure
        (None; taken for the disk's, such a job, requeued free, retired VM after VM). Beside another attempt it may
        as well be that one's: requeued, the VM retired."""
        if not any(words in tail.lower() for words in NO_SPACE):
            return None
        try:
            total, _, free = self._disk_usage(self.work_dir)
            if nearly_full(free, total) and self._make_room is not None and \
                    self._make_room(2 * full_bytes(total) - free) > 0:
                total, _, free = self._disk_usage(self.work_dir)
        except OSError:
            return None
        short = self._inodes(self.work_dir)  # ENOSPC with bytes free: no new file can be made
        if not nearly_full(free, total) and short is None:
            return None
        full = short or f"nearly full ({human_bytes(free)} free of {human_bytes(total)})"
        with self._lock:
            roots = {**self._ending, **self._roots}
        held = {k: measure(root, self._max_entries).bytes for k, root in roots.items()}
        for k, deleted in held_deleted(roots, max_entries=self._max_entries).items():
            held[k] += deleted
        least = CULPRIT_SHARE * self.share.quota_bytes
        if held.get(key, 0) >= least:  # it may have filled the disk itself: its own failure
            return None
        said = (f"this VM's disk was {full} when the job failed, its work directory holding "
                f"{human_bytes(held.get(key, 0))}")
        if any(used >= least for k, used in held.items() if k != key):
            return f"{said}: a job beside it filled it"  # the one the watch stops (``decide``), or whose upload ends
        with self._lock:
            before, beside = key in self._full_before, self._beside.get(key, False)
        if not before and not beside:  # it filled as the job ran alone, with what no job's directory holds: its own
            return None  # image, its container's layer or volumes as like as not (maybe not freed yet): its own
        why = f"its disk is {full} with what no job on it holds"
        self._log.error("a job failed on a nearly full disk no job filled", extra={
            "job_id": key[0], "attempt": key[1], "free_bytes": free, "reason": why})
        retire(why)
        return f"{said}, and no job on it holds the rest: this VM takes no more jobs"

    def _run(self) -> None:
        while not self._closed:
            began = time.monotonic()
            try:
                self.look()
            except Exception:  # noqa: BLE001 - the watch must outlive one bad round
                self._log.exception("disk measurement failed")
            cost = time.monotonic() - began
            self._wake.wait(max(self._look_s, cost / COST_SHARE))
            self._wake.clear()
