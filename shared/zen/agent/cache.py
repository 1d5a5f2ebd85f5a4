"""The agent's warm cache (issue 15): staged input objects kept between jobs on this VM, and the images
it pulled, so Zen can send the next job that needs them here first (``zen.core.routing``). Objects are
keyed by a digest of their metadata, bounded by ``ZEN_AGENT_CACHE_BYTES`` (least recently used out
first; out too as the work disk fills, before any job is stopped or fails to stage for it: ``give_way``),
downloaded once however many attempts miss on it at once, and reported in VM heartbeats as the inputs they complete;
an entry an earlier agent kept is checked against its object's checksum at its first hit;
images beyond ``ZEN_AGENT_IMAGES_KEEP`` are removed in the background.
Rules: docs/reference/agent.md (the warm cache)
"""

from __future__ import annotations

import base64
import errno
import hashlib
import logging
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from zen.agent.diskquota import FULL_MIN_BYTES

log = logging.getLogger("zen.agent.cache")
REPORTED = 16  # inputs (and images) a VM heartbeat lists at most (VmHeartbeat's bound)
IMAGES_KEEP = 8  # container images kept on the VM (ZEN_AGENT_IMAGES_KEEP, at most REPORTED)
_PART = ".part"
_CHUNK = 1024 * 1024
FETCH_WAIT_S = 0.5  # between two looks at its own cancel, while an attempt waits for another's download


def object_key(blob: Any) -> str | None:
    """The digest an object is kept under, from its metadata; None when the metadata cannot pin its
    content (no generation, or no checksum)."""
    if blob.generation is None or not (blob.crc32c or blob.md5_hash) or blob.size is None:
        return None
    identity = f"{blob.bucket.name}/{blob.name}#{blob.generation}:{blob.crc32c}:{blob.md5_hash}:{blob.size}"
    return hashlib.sha256(identity.encode()).hexdigest()[:40]


class InputCache:
    """Thread-safe: staging runs in a worker thread while the agent's loop reads ``report``."""

    def __init__(self, directory: str | Path, max_bytes: int, images_keep: int = IMAGES_KEEP,
                 forget_image: Callable[[str], Any] | None = None):
        self.directory, self.max_bytes = Path(directory), max_bytes
        self.images_keep, self._forget_image = images_keep, forget_image
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, int] = OrderedDict()  # key -> bytes, least recently used first
        self._bytes = 0  # sum of _entries' sizes, kept as they change (summing them on each keep was quadratic)
        self._inputs: OrderedDict[str, frozenset[str | None]] = OrderedDict()  # input URI -> its objects' keys
        self._images: OrderedDict[str, None] = OrderedDict()
        # Entries this agent wrote (from a download the client checked) or checked since: the rest were found on the
        # disk, kept by an earlier agent, and a VM reset may have left one torn (written, renamed, not yet on the disk).
        self._checked: set[str] = set()
        self._fetching: dict[str, threading.Event] = {}  # key -> set once the attempt downloading it is done
        self.hits = self.misses = self.hit_bytes = 0
        if max_bytes > 0:
            self._load()

    def _load(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        found = []
        for path in self.directory.iterdir():
            if path.name.endswith(_PART):
                path.unlink(missing_ok=True)  # a copy cut short by a crash
            elif path.is_file():
                stat = path.stat()
                found.append((stat.st_mtime, path.name, stat.st_size))
        for _, key, size in sorted(found):
            self._entries[key] = size
            self._bytes += size
        self._evict()

    def fetch(self, blob: Any, target: Path, download: Callable[[Path], None],
              cancelled: Callable[[], bool] = lambda: False) -> bool:
        """Put ``blob``'s content at ``target``: the cached copy on a hit (True), else ``download(target)``
        and keep a copy (False). Sizes are the bytes on disk, what the bound holds: an object stored with
        ``Content-Encoding: gzip`` is served decompressed, larger than the ``blob.size`` Cloud Storage lists.
        An object another attempt is downloading now (a VM running several jobs: an array's tasks on one data
        set) is waited for and copied once kept, not downloaded again; downloaded after all if that download
        ends without a copy kept, or once ``cancelled()`` (whose ``download`` then ends at once)."""
        key = object_key(blob) if self.max_bytes > 0 else None
        if key is None:
            self._download(blob, target, download)
            return False
        path, mine = self.directory / key, None
        while True:
            if self._hit(key, blob, path, target):
                return True
            if (blob.size or 0) > self.max_bytes:  # never kept: nothing to wait for
                break
            with self._lock:
                other = self._fetching.get(key)
                if other is None:
                    mine = self._fetching[key] = threading.Event()
                    break
            while not other.wait(FETCH_WAIT_S) and not cancelled():
                pass
            if cancelled():
                break
        try:
            self._download(blob, target, download)
            with self._lock:
                self.misses += 1
            size = target.stat().st_size
            if size <= self.max_bytes:
                self._keep(key, target, size)
        finally:
            if mine is not None:
                with self._lock:
                    del self._fetching[key]
                mine.set()
        return False

    def _download(self, blob: Any, target: Path, download: Callable[[Path], None]) -> None:
        """``download(target)``; on a full disk the cache gives way (``give_way``: the object's size and a nearly
        full disk's margin) and it is downloaded again, until it fits or the cache has nothing left to give."""
        while True:
            try:
                download(target)
                return
            except OSError as exc:
                full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
                if not full or not self.give_way((blob.size or 0) + FULL_MIN_BYTES):
                    raise

    def _hit(self, key: str, blob: Any, path: Path, target: Path) -> bool:
        """Whether ``target`` got the kept copy; an entry missing, not its size or not its checksum is dropped."""
        with self._lock:
            kept = self._entries.get(key)
        if kept is None:
            return False
        try:
            if path.stat().st_size == kept and self._copied_making_room(key, blob, path, target, kept):
                os.utime(path)
                with self._lock:
                    if key in self._entries:  # (given way or evicted since the copy was made: the copy stands)
                        self._entries.move_to_end(key)
                    self.hits += 1
                    self.hit_bytes += kept
                return True
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT) or not target.parent.is_dir():
                raise  # the target's failure (its disk full, its folder gone), which a download meets too
        log.warning("cached object dropped: missing, not its size or not its checksum",
                    extra={"key": key, "object": blob.name})
        self._drop(key)
        return False

    def _copied_making_room(self, key: str, blob: Any, path: Path, target: Path, size: int) -> bool:
        """``_copied``; a copy that finds the disk full makes the cache give way (its other entries: this one is kept) and
        is made again, as a download is (``_download``): no hit fails for space the cache holds."""
        while True:
            try:
                return self._copied(key, blob, path, target)
            except OSError as exc:
                full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
                if not full or not self.give_way(size + FULL_MIN_BYTES, keep=key):
                    raise

    def _copied(self, key: str, blob: Any, path: Path, target: Path) -> bool:
        """Copy the entry ``path`` to ``target``: whole, or, for an entry not yet checked, only if its bytes have the
        object's checksum (crc32c, else MD5; an object stored gzip-encoded is served decompressed, its checksum that of
        the compressed bytes: it cannot be checked, so False: downloaded again); False leaves ``target`` to the download."""
        with self._lock:
            checked = key in self._checked
        if checked:
            shutil.copyfile(path, target)
            return True
        if (getattr(blob, "content_encoding", None) or "").lower() == "gzip":
            return False
        if blob.crc32c:
            import google_crc32c  # with the Cloud Storage client, as the objects it stages

            digest: Any = google_crc32c.Checksum()
            wanted = blob.crc32c
        else:
            digest, wanted = hashlib.md5(usedforsecurity=False), blob.md5_hash
        with open(path, "rb") as source, open(target, "wb") as copy:
            while chunk := source.read(_CHUNK):
                digest.update(chunk)
                copy.write(chunk)
        if base64.b64encode(digest.digest()).decode() != wanted:
            return False
        with self._lock:
            self._checked.add(key)
        return True

    def _keep(self, key: str, source: Path, size: int) -> None:
        # A partial file of its own: two attempts missing on one object at once never write one file.
        handle, name = tempfile.mkstemp(dir=self.directory, prefix=key + ".", suffix=_PART)
        os.close(handle)
        partial = Path(name)
        try:
            shutil.copyfile(source, partial)
            os.replace(partial, self.directory / key)
        except OSError as exc:  # a full disk costs the cache, never the job
            partial.unlink(missing_ok=True)
            log.warning("object not cached", extra={"key": key, "error": str(exc)})
            return
        with self._lock:
            self._bytes += size - self._entries.get(key, 0)  # the same key kept twice (two misses at once) counts once
            self._entries[key] = size
            self._entries.move_to_end(key)
            self._checked.add(key)
        self._evict()

    def _evict(self) -> None:
        with self._lock:
            gone = []
            while self._entries and self._bytes > self.max_bytes:
                key, size = self._entries.popitem(last=False)
                self._bytes -= size
                self._checked.discard(key)
                gone.append(key)
        for key in gone:
            (self.directory / key).unlink(missing_ok=True)

    def give_way(self, wanted: int, keep: str | None = None) -> int:
        """Remove the least recently used entries (but ``keep``) until ``wanted`` bytes are freed or none is left;
        returns the bytes freed. Asked when the work disk is nearly full (``zen.agent.diskquota.DiskWatch``) or a
        download or a hit's copy finds it full (``_download``, ``_copied_making_room``, keeping the entry copied): the
        bound is a number of bytes, whatever the disk has free, and no job is stopped, nor its staging failed, for
        space the cache holds.
        An attempt copying an entry removed meanwhile keeps the copy it opened, or downloads the object."""
        with self._lock:
            gone, freed = [], 0
            for key in [key for key in self._entries if key != keep]:
                if freed >= wanted:
                    break
                size = self._entries.pop(key)
                self._bytes -= size
                self._checked.discard(key)
                gone.append(key)
                freed += size
            kept = self._bytes
        for key in gone:
            (self.directory / key).unlink(missing_ok=True)
        if gone:
            log.warning("cached objects removed: the work disk is full or nearly",
                        extra={"entries": len(gone), "freed_bytes": freed, "kept_bytes": kept})
        return freed

    def _drop(self, key: str) -> None:
        with self._lock:
            self._bytes -= self._entries.pop(key, 0)
            self._checked.discard(key)
        (self.directory / key).unlink(missing_ok=True)

    def staged(self, uri: str, keys: set[str | None]) -> None:
        """Input ``uri`` was staged from the objects ``keys`` (None: one not kept)."""
        with self._lock:
            self._inputs[uri] = frozenset(keys)
            self._inputs.move_to_end(uri)
            while len(self._inputs) > 4 * REPORTED:
                self._inputs.popitem(last=False)

    def ran_image(self, image: str) -> None:
        """``image`` ran on this VM, told as its job ended (docker pulled it if it was not here; not after a ``docker
        run`` docker itself failed, exit 125: maybe its pull): it is the most recently used;
        beyond ``images_keep``, the least recently used image is removed from the VM (``forget_image``,
        ``docker image rm`` without force, in the background: docker refuses an image a container still
        runs, which then stays on the disk, unreported, until a job runs it again)."""
        with self._lock:
            self._images[image] = None
            self._images.move_to_end(image)
            evicted = [self._images.popitem(last=False)[0] for _ in range(len(self._images) - self.images_keep)]
        if evicted and self._forget_image is not None:
            # In a thread of its own: ``docker image rm`` may take minutes, and other jobs may be running. Run in
            # their thread (as a job started), it held a job's supervision (heartbeats, stops, its runtime limit, the
            # VM's shutdown), long enough for Zen's sweep to call the running job lost and rerun it.
            threading.Thread(target=self._forget, args=(self._forget_image, evicted), name="zen-image-rm",
                             daemon=True).start()

    def holds_image(self, image: str) -> bool:
        """Whether ``image`` ran on this VM and is kept (``ran_image``)."""
        with self._lock:
            return image in self._images

    @staticmethod
    def _forget(forget_image: Callable[[str], Any], images: list[str]) -> None:
        for image in images:
            try:
                forget_image(image)
            except Exception:  # noqa: BLE001 - best effort: the image stays on the disk
                log.exception("image not removed", extra={"image": image})

    def report(self) -> tuple[list[str] | None, list[str] | None]:
        """(inputs whose every object is held, images run), most recent first, for the VM heartbeat."""
        with self._lock:
            held = [uri for uri, keys in reversed(self._inputs.items())
                    if None not in keys and all(key in self._entries for key in keys)][:REPORTED]
            images = list(reversed(self._images))[:REPORTED]
        return held or None, images or None
