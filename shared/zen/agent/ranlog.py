"""The attempts this VM ran, kept on its disk: an agent systemd restarts (after a crash, an upgrade) still knows
them, and never claims a copy of one's start again (``Slots.ran``).

Kept in memory only, the restarted agent took a spare copy of the start of the attempt its dead predecessor ran (an
ack that failed, a warm offer's region copy) for a new one: it claimed it, and Zen, which had not heard the run's
RUNNING yet, confirmed it, so the attempt ran a second time on the same VM, its journaled SUCCEEDED (an older seq
than the claim) dropped as seen; a job stopping ended CANCELLED "stopped before it started", or, taken back by its
queue, was run again. One line per attempt (``<attempt> <job_id>``, job ids hold no space), appended and synced
when the attempt is confirmed; the file is rewritten with the newest ``kept`` once it holds twice as many. Best
effort: a disk that cannot be written logs once and keeps the attempts in memory, as before."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
from pathlib import Path

log = logging.getLogger("zen.agent.ranlog")
Key = tuple[str, int]  # (job_id, attempt), as zen.agent.slots.Key
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def vm_file(work_dir: str | os.PathLike, folder: str, vm: str) -> Path:
    """``<work_dir>/<folder>/<VM name>`` (the name made safe for a file): the VM's agents' (the work directory is the
    VM's disk; a VM its MIG recreates after a preemption gets a new disk, and none of what its predecessor kept)."""
    return Path(work_dir) / folder / (_UNSAFE.sub("-", vm).strip(".") or "-")


def write_whole(path: Path, text: str) -> None:
    """``text`` as ``path``, whole or not at all (a file of its own on the disk, renamed over it). Raises ``OSError``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def path_for(work_dir: str | os.PathLike, vm: str) -> Path:
    """``<work_dir>/.ran/<VM name>``: the attempts the VM's agents ran."""
    return vm_file(work_dir, ".ran", vm)


def ran_since_boot(work_dir: str | os.PathLike) -> bool:
    """Whether an agent of this boot ran an attempt here: a log under ``<work_dir>/.ran/`` written since the VM booted
    (any VM's: read before the VM's name is, and a VM's work directory is its own). An attempt's container outlives
    neither a reboot nor its VM's disk (a VM its MIG recreates gets a new one). Boot time unknown: any log."""
    try:
        with open("/proc/stat") as stat:
            booted = next((float(line.split()[1]) for line in stat if line.startswith("btime ")), 0.0)
    except OSError:
        booted = 0.0
    try:
        return any(entry.is_file() and entry.stat().st_size and entry.stat().st_mtime >= booted
                   for entry in os.scandir(Path(work_dir) / ".ran"))
    except OSError:
        return False  # no log: no attempt ran here


class RanLog:
    def __init__(self, path: Path, kept: int):
        self.path, self.kept, self._lines, self._failed = path, kept, 0, False

    def load(self) -> list[Key]:
        """The attempts an earlier agent of this VM ran, oldest first (the newest ``kept``)."""
        try:
            text = self.path.read_text()
            lines = text.splitlines()[:None if text.endswith("\n") else -1]  # a last line without its end: cut by a crash
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("could not read the attempts this VM ran", extra={"path": str(self.path), "error": str(exc)})
            return []
        found: list[Key] = []
        for line in lines:
            attempt, _, job_id = line.partition(" ")
            if attempt.isdigit() and job_id and " " not in job_id:
                found.append((job_id, int(attempt)))
        self._lines = len(lines) if text.endswith("\n") or not text else 2 * self.kept  # cut: the next add rewrites
        return found[-self.kept:]

    def add(self, key: Key, newest: list[Key]) -> None:
        """``key`` ran here (``newest``: what is kept, ``key`` last, for the rewrite)."""
        try:
            if self._lines + 1 >= 2 * self.kept:
                self._rewrite(newest)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a") as out:
                    out.write(f"{key[1]} {key[0]}\n")
                    out.flush()
                    os.fsync(out.fileno())
                self._lines += 1
        except OSError as exc:
            if not self._failed:
                log.error("could not keep the attempts this VM ran on disk: a restarted agent may claim one again",
                          extra={"path": str(self.path), "error": str(exc)})
            self._failed = True

    def _rewrite(self, newest: list[Key]) -> None:
        write_whole(self.path, "".join(f"{attempt} {job_id}\n" for job_id, attempt in newest[-self.kept:]))
        self._lines = min(len(newest), self.kept)
