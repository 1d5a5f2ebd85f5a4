"""The journal of final reports: an attempt's final report outlives the agent that sends it.

Any report but CLAIMED and RUNNING is written to ``<work_dir>/.reports/<VM name>/`` before it is first
published, and removed once Pub/Sub accepted it; one not sent within its budget stays, and the agent
systemd restarts (after a crash, an upgrade, a reboot) publishes what its VM's earlier agent left
(``replay``) before it pulls a start; the agent that kept it sends it again every ``RESEND_S`` while it
lives (it sent it only at its next start: a job that ended was run again meanwhile, its attempt lost).
Beside them, ``<attempt name>.running`` marks an attempt this VM runs whose final report is not written yet
(``running``, in container mode): the agent systemd restarts after its predecessor died reports each such attempt
ended (``left_running``), once its container is known gone; one whose job had ended (its exit code and what its
upload needs written in the mark: ``exited``, its lease kept there: ``renewed``) has its upload resumed instead
(``zen.agent.resume``). A final report the disk cannot keep (full, or failing) is held in the agent's memory instead,
and sent again as the journal's are until sent (``keep``, ``replay``): only a restart loses it then. Beside the
directory, ``<VM name>.seq`` keeps the highest report ``seq`` drawn (``drew``), which the next agent draws above
(``seq_floor``) even when the VM's clock was stepped back. Why, and the file format:
docs/reference/agent.md#final-reports-outlive-the-agent
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from zen.agent.runner import attempt_name
from zen.core.errors import ZenError
from zen.core.models import AgentStatus, Heartbeat

log = logging.getLogger("zen.agent.journal")
JOURNAL_DIR = ".reports"  # in the work directory
REPLAY_BUDGET_S = 30.0  # each report kept, sent again (by the next agent, or by the live one every RESEND_S)
RESEND_S = 30.0  # how often a live agent sends again the final reports it kept
MAX_AGE_S = 86400.0  # a report older than this is dropped unsent (and a mark not renewed since, unreported)
RUNNING = ".running"  # an attempt's mark while it runs (``Journal.running``)
ENDED = "ended"  # in a mark: how its job ended, once docker said (``Journal.exited``)
NOT_FINAL = (AgentStatus.CLAIMED, AgentStatus.RUNNING)
SEQ_FLOOR = ".seq"  # beside the VM's journal directory: the highest report seq its agents drew (``Journal.drew``)
BOOT_ID = "/proc/sys/kernel/random/boot_id"  # in a mark: the boot it was written in (a reboot ends every container)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class Kept:
    """One final report in the journal, locked until ``done``; ``fd`` None: one the disk could not keep, held in the
    journal's memory (``Journal._held``) if not sent."""

    def __init__(self, journal: Journal, path: Path, fd: int | None, heartbeat: Heartbeat, written_at: float):
        self._journal, self.path, self._fd = journal, path, fd
        self._heartbeat, self._written_at = heartbeat, written_at

    def done(self, sent: bool | None) -> None:
        """The publish is over: sent (the file goes), or not: its budget ran out (logged) or the publish raised.
        Not sent, the file stays (unlocked) for ``replay`` (this agent's next, or the next agent's): Zen takes a late final report,
        and without it a job that ended would be run again (its attempt lost). A duplicate is harmless (``seq``)."""
        if sent:
            return None if self._fd is None else _remove(self.path, self._fd)
        if sent is not None:
            hb = self._heartbeat
            log.error("final report not sent within its budget: kept, to be sent again", extra={
                **self._journal.extra, "job_id": hb.job_id, "attempt": hb.attempt, "status": hb.status.value,
                "seq": hb.seq, "in_memory": self._fd is None})
        if self._fd is None:  # the disk could not keep it: held, sent again by ``replay`` while this agent lives
            with self._journal._held_lock:
                self._journal._held[self.path.name] = (self._written_at, self._heartbeat)
        else:
            os.close(self._fd)


class Journal:
    def __init__(self, work_dir: str | os.PathLike, vm: str, extra: dict | None = None,
                 wall_clock: Callable[[], float] = time.time):
        name = _UNSAFE.sub("-", vm)
        self.dir = Path(work_dir) / JOURNAL_DIR / (name if name.strip(".") else f"-{name}")
        self.extra = extra or {}
        self._wall_clock = wall_clock
        self._marks: dict[str, int] = {}  # attempt name -> the locked fd of its mark (``running``)
        self._records: dict[str, dict] = {}  # attempt name -> what its mark holds (``exited``, ``left_running``)
        self._marks_lock = threading.Lock()  # attempts run in threads of their own (several at once)
        self._seq_path = self.dir.parent / f"{self.dir.name}{SEQ_FLOOR}"
        self._seq_failed = False  # logged once until a write succeeds again (every report draws a seq)
        # Final reports the disk could not keep (``keep``) and not sent yet: file name -> (written_at, the report).
        self._held: dict[str, tuple[float, Heartbeat]] = {}
        self._held_lock = threading.Lock()

    def _write(self, path: Path, record: dict) -> int:
        """``record`` written whole at ``path`` (a temp file renamed, both on the disk), its modification time this
        journal's wall clock (a mark's last renewal: ``renewed``); returns its descriptor, locked across the rename
        until the file is removed (a replay, another agent's, leaves it). Raises OSError, its temp file removed (left,
        a full disk kept one at each failed write, a mark's at every report of an upload, until the next start)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=self.dir, prefix=".", suffix=".tmp")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = memoryview(json.dumps(record).encode())
            while data:
                data = data[os.write(fd, data):]
            now = self._wall_clock()
            os.utime(fd, (now, now))
            os.fsync(fd)
            os.rename(temp, path)
            _fsync_dir(self.dir)
        except OSError:
            _remove(Path(temp), fd)
            raise
        return fd

    def seq_floor(self) -> int:
        """The highest report ``seq`` an agent of this VM drew (``drew``): the next agent draws above it whatever its
        clock says. 0 when none is known."""
        try:
            return int(self._seq_path.read_bytes().strip() or 0)
        except (OSError, ValueError):
            return 0

    def drew(self, seq: int) -> None:
        """Keep ``seq``, the highest drawn, for the agent systemd restarts after this one: one fixed-width write in
        place, which the agent's death cannot tear (not synced: a reboot may lose the last few). Best effort: a
        failure is logged, and the next agent counts from its clock alone, as before."""
        try:
            self._seq_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._seq_path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.pwrite(fd, f"{seq:020d}\n".encode(), 0)
            finally:
                os.close(fd)
            self._seq_failed = False
        except OSError as exc:
            if self._seq_failed:
                return
            self._seq_failed = True
            log.error("report seq not kept: a restarted agent whose clock went back may have its reports ignored",
                      extra={**self.extra, "path": str(self._seq_path), "error": str(exc)})

    def keep(self, heartbeat: Heartbeat) -> Kept:
        """Write ``heartbeat`` (a final report about to be published) to the journal. One that cannot be written (a
        full disk) is logged and sent all the same; not sent, it is held in memory (``Kept.done``) and sent again as the
        journal's are: only an agent restart loses it."""
        path = self.dir / f"{attempt_name(heartbeat.job_id, heartbeat.attempt)}.json"
        written_at = self._wall_clock()
        record = {"written_at": written_at, "report": json.loads(heartbeat.to_bytes())}
        with self._held_lock:  # a later report of the attempt replaces the one held, as its file would
            self._held.pop(path.name, None)
        try:
            return Kept(self, path, self._write(path, record), heartbeat, written_at)
        except OSError as exc:
            log.error("final report not journaled: an agent restart would lose it", extra={
                **self.extra, "job_id": heartbeat.job_id, "attempt": heartbeat.attempt, "error": str(exc)})
            return Kept(self, path, None, heartbeat, written_at)
        finally:  # before its first publish: a mark left means no final report of the attempt was ever sent
            self.over(heartbeat.job_id, heartbeat.attempt)

    def running(self, job_id: str, attempt: int) -> None:
        """Mark the attempt as running on this VM until its final report is written (``keep``) or it ends without
        one (``over``); the mark stays locked by this agent meanwhile. Best effort: a mark not written is logged,
        and a restart then leaves that attempt to Zen's lost-job sweep, as before."""
        name = attempt_name(job_id, attempt)
        record = {"written_at": self._wall_clock(), "job_id": job_id, "attempt": attempt, "boot": boot_id()}
        try:
            fd = self._write(self.dir / f"{name}{RUNNING}", record)
        except OSError as exc:
            log.error("running attempt not marked: an agent restart would leave it to Zen's sweep", extra={
                **self.extra, "job_id": job_id, "attempt": attempt, "error": str(exc)})
            return
        with self._marks_lock:
            self._marks[name], self._records[name] = fd, record

    def exited(self, job_id: str, attempt: int, ended: dict) -> None:
        """The attempt's job has ended and its final report waits for its upload: ``ended`` (its status, exit code and
        what the upload needs: ``zen.agent.resume``) written in its mark, which the agent systemd restarts after this
        one died reads (``ended_of``). Best effort, as ``running``: a mark not rewritten leaves the attempt PREEMPTED."""
        self._rewrite(attempt_name(job_id, attempt), ended=ended)

    def renewed(self, job_id: str, attempt: int, at: float) -> None:
        """A report of the attempt Pub/Sub accepted, its publish begun at ``at`` (``AttemptReport.accepted_at``), kept
        in its mark once its job has ended (``exited``): an upload resumed after a restart keeps the attempt's lease.
        Each one also sets the mark's modification time to the wall clock (not synced): what ``left_running`` judges a
        mark's age by. Judged from the attempt's start, a job that ran for over a day had its mark dropped by the
        agent restarted after its predecessor died: left to Zen's sweep (an attempt spent), or, ended and uploading
        its outputs, run again from its start. Best effort, as ``running``."""
        name = attempt_name(job_id, attempt)
        with self._marks_lock:
            ended = self._records.get(name, {}).get(ENDED)
            fd = self._marks.get(name)
            if ended is None and fd is not None:  # under the lock: ``over`` closes it
                try:
                    now = self._wall_clock()
                    os.utime(fd, (now, now))
                except OSError as exc:
                    log.warning("running attempt's mark not renewed", extra={**self.extra, "job_id": job_id,
                                                                             "attempt": attempt, "error": str(exc)})
        if ended is not None and ended.get("renewed_at") != at:
            self._rewrite(name, ended={**ended, "renewed_at": at})

    def rebooted(self, job_id: str, attempt: int) -> bool:
        """Whether the VM restarted since the mark of an attempt this agent holds (taken over: ``left_running``) was
        written: its boot is known and not this one (a mark of an older agent has none: not known)."""
        with self._marks_lock:
            boot = self._records.get(attempt_name(job_id, attempt), {}).get("boot")
        return boot is not None and boot != boot_id()

    def ended_of(self, job_id: str, attempt: int) -> dict | None:
        """What ``exited`` wrote in the mark of an attempt this agent holds (taken over: ``left_running``), or None."""
        with self._marks_lock:
            return self._records.get(attempt_name(job_id, attempt), {}).get(ENDED)

    def _rewrite(self, name: str, **fields: object) -> None:
        """The mark of ``name`` written again with ``fields`` (locked before its rename: never unlocked meanwhile)."""
        with self._marks_lock:
            record = self._records.get(name)
        if record is None:  # not marked (local mode, a mark not written): nothing resumes it
            return
        record = {**record, **fields}
        path = self.dir / f"{name}{RUNNING}"
        try:
            fd = self._write(path, record)
        except OSError as exc:
            log.error("running attempt's mark not rewritten", extra={**self.extra, "path": str(path), "error": str(exc)})
            return
        with self._marks_lock:
            old = self._marks.get(name)
            if old is not None:
                self._marks[name], self._records[name] = fd, record
        if old is None:  # over meanwhile
            _remove(path, fd)
        else:
            os.close(old)

    def over(self, job_id: str, attempt: int) -> None:
        """The attempt's mark (``running``) removed, if this agent holds one."""
        name = attempt_name(job_id, attempt)
        with self._marks_lock:
            fd = self._marks.pop(name, None)
            self._records.pop(name, None)
        if fd is not None:
            _remove(self.dir / f"{name}{RUNNING}", fd)

    def left_running(self) -> list[tuple[str, int]]:
        """The attempts an agent of this VM that died was running, oldest mark first: each mark no live agent holds
        and whose final report is not in the journal (``replay`` sends that one). Their marks are taken over (held
        as ``running`` holds them) until the report this agent sends of each is written (``keep``); a mark no agent wrote
        or renewed (``renewed``) for a day, or that cannot be read, is dropped. Never raises."""
        try:
            names = sorted(os.listdir(self.dir))
        except OSError:
            return []
        found: list[tuple[float, str, int]] = []
        for name in (name for name in names if name.endswith(RUNNING)):
            path = self.dir / name
            if (fd := _taken(path)) is None:  # gone, or a live agent runs it
                continue
            try:
                with os.fdopen(os.dup(fd), "rb") as file:
                    mark = json.loads(file.read())
                job_id, attempt, written_at = str(mark["job_id"]), int(mark["attempt"]), float(mark["written_at"])
                renewed_at = max(written_at, os.fstat(fd).st_mtime)
                reported = (self.dir / f"{name.removesuffix(RUNNING)}.json").exists()
                if attempt_name(job_id, attempt) == name.removesuffix(RUNNING) and not reported and \
                        self._wall_clock() - renewed_at <= MAX_AGE_S and _same(path, fd):
                    with self._marks_lock:
                        self._marks[name.removesuffix(RUNNING)], self._records[name.removesuffix(RUNNING)] = fd, mark
                    found.append((written_at, job_id, attempt))
                    continue
            except Exception:  # noqa: BLE001 - a bad mark must not keep the agent from starting
                log.exception("running attempt's mark dropped", extra={**self.extra, "path": str(path)})
            _remove(path, fd)
        return [(job_id, attempt) for _, job_id, attempt in sorted(found)]

    def replay(self, publish: Callable[..., None], *, leftovers: bool = True) -> int:
        """Publish again every report of this VM kept in the journal but one an agent is sending (each within
        ``REPLAY_BUDGET_S``), then remove it, those held in memory (``keep``) first; returns how many were sent. The
        first not sent (Pub/Sub unreachable) ends the round: the others wait for the next. ``leftovers`` (at the
        agent's start): temp files a crash left are removed too (a live agent's may be one being written). Never
        raises."""
        sent, down = self._replay_held(publish)
        if down:
            return sent
        try:
            names = sorted(os.listdir(self.dir))
        except OSError:
            return sent  # no journal yet
        for name in [n for n in names if not n.endswith(RUNNING)] if leftovers else [n for n in names if n.endswith(".json")]:
            path = self.dir / name
            if (fd := _taken(path)) is None:  # removed meanwhile, not a file, or an agent alive sends it
                continue
            outcome: bool | None = None  # None: not sent (Pub/Sub unreachable, or the agent dying): kept, unlocked
            try:
                if not name.endswith(".json"):  # a temp file left before its rename: never published
                    log.warning("unfinished journal file removed", extra={**self.extra, "path": str(path)})
                    outcome = False
                else:  # (not the same file: removed, sent, while we opened it)
                    outcome = self._again(path, fd, publish) if _same(path, fd) else False
                    sent += bool(outcome)
            except Exception:  # noqa: BLE001 - a bad file must not keep the agent from starting
                log.exception("journal file dropped", extra={**self.extra, "path": str(path)})
                outcome = False
            finally:
                os.close(fd) if outcome is None else _remove(path, fd)
            if outcome is None:  # the others wait for the next round
                break
        return sent

    def _replay_held(self, publish: Callable[..., None]) -> tuple[int, bool]:
        """The reports held in memory (``keep``) published again: how many were sent, and whether one was not."""
        with self._held_lock:
            held = list(self._held.items())
        sent = 0
        for name, entry in held:
            try:
                outcome = self._publish_again(entry[1], entry[0], publish)
            except Exception:  # noqa: BLE001 - as a bad journal file: dropped
                log.exception("held final report dropped", extra=self.extra)
                outcome = False
            if outcome is None:
                return sent, True
            with self._held_lock:
                if self._held.get(name) is entry:  # (not a later report of the attempt, held meanwhile)
                    del self._held[name]
            sent += outcome
        return sent, False

    def _again(self, path: Path, fd: int, publish: Callable[..., None]) -> bool | None:
        """Publish the report again: True once sent, False when dropped (too old), None when not sent."""
        with os.fdopen(os.dup(fd), "rb") as file:
            record = json.loads(file.read())
        return self._publish_again(Heartbeat.model_validate(record["report"]), float(record["written_at"]), publish)

    def _publish_again(self, heartbeat: Heartbeat, written_at: float, publish: Callable[..., None]) -> bool | None:
        """``_again``'s publish of ``heartbeat``, written (or held) at ``written_at``."""
        fields = {**self.extra, "job_id": heartbeat.job_id, "attempt": heartbeat.attempt,
                  "status": heartbeat.status.value, "seq": heartbeat.seq}
        age = self._wall_clock() - written_at
        if age > MAX_AGE_S:
            log.warning("kept final report dropped: too old", extra={**fields, "age_s": round(age)})
            return False
        try:
            publish(heartbeat, budget_s=REPLAY_BUDGET_S)
        except ZenError as exc:  # kept: tried again next round (a late report still counts)
            log.error("kept final report not sent again; kept", extra={**fields, "error": str(exc)})
            return None
        log.warning("kept final report sent", extra={**fields, "age_s": round(age)})
        return True


def boot_id(path: str | None = None) -> str | None:
    """This boot's id (``BOOT_ID``; None when it cannot be read)."""
    try:
        with open(path or BOOT_ID) as file:
            return file.read().strip() or None
    except OSError:
        return None


def _taken(path: Path) -> int | None:
    """``path`` opened and locked (without waiting) for this agent; None if it is gone, not a file, or locked by an
    agent alive."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError
        os.close(fd)
        return None
    return fd


def _same(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        named, held = os.stat(path, follow_symlinks=False), os.fstat(fd)
    except OSError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _remove(path: Path, fd: int) -> None:
    """Remove ``path`` if it still names ``fd``'s file (a later report of the attempt may have replaced
    it), then close ``fd`` (its lock goes with it)."""
    try:
        if _same(path, fd):
            os.unlink(path)
    except OSError as exc:
        log.warning("journal file not removed", extra={"path": str(path), "error": str(exc)})
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
