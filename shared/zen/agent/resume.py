"""An attempt whose job ended (docker gave its exit code) and whose agent died before the attempt's final report was
written, while it uploaded the job's outputs (a crash, the OOM killer, ``kill -9``): the agent systemd restarts on the
same VM resumes the upload and sends the attempt's real final report, SUCCEEDED or FAILED with the exit code, where
it reported the attempt PREEMPTED and Zen ran the finished job again from its start.

How the job ended is written in the attempt's mark (``zen.agent.journal``: ``Journal.exited``, before the upload
begins; ``base`` and ``ended`` here), and each report Pub/Sub accepts meanwhile renews it there
(``Journal.renewed``). The new agent resumes such an attempt (``take``) only when the VM has not rebooted since (the
lease's times are the boot's monotonic clock), the attempt's lease still holds (``zen.agent.fence``: once it fell, Zen
may have taken the attempt for lost and given the job to another VM; PREEMPTED, with the fence's note, as the dead
agent would have reported it), and its work directory is there, locked by no live agent (locked now, before the
work-dir sweep, which then leaves it). Otherwise it is reported PREEMPTED, as before (``zen.agent.restart``). The
resumed upload sends every output again (the objects are the attempt's own: a repeat is harmless), within what is left
of its budget from the job's end; the report says the upload was resumed, and the attempt's last output entry is
numbered after those the dead agent numbered (``Ended.numbered``: numbered 1 again, it took the job's first line's).
Why: docs/reference/agent.md#final-reports-outlive-the-agent
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence

from zen.agent import fence
from zen.agent.journal import Journal, boot_id  # (None: not read, nothing is resumed)
from zen.agent.reports import AttemptReport
from zen.agent.settings import AgentSettings
from zen.agent.slots import ControlRouter, Slots
from zen.agent.staging import AttemptData
from zen.core.models import AgentStatus, StartMessage

RESUMABLE = (AgentStatus.SUCCEEDED, AgentStatus.FAILED)  # the job's own end: its exit code decided


def base(start: StartMessage, attempt: AttemptReport) -> dict[str, object]:
    """What the upload of an attempt resumed needs from its start: its GPUs (its slot), its outputs, its node."""
    return {"gpus": start.gpus, "outputs": start.outputs, "node": attempt.gang.rank if attempt.gang else None}


def ended(base: dict[str, object], final: AgentStatus, exit_code: int | None, note: str | None, tail: str, data: AttemptData | None,
          limit_s: float | None, attempt: AttemptReport, now: float, numbered: int = 0) -> dict[str, object]:
    """The mark's record of how the job ended (``Journal.exited``), as its upload begins (``now``, the agent's clock;
    ``numbered``: the last ``seq`` its output may reach, ``AttemptOutput.numbered``)."""
    return {**base, "status": final.value, "exit_code": exit_code, "note": note, "tail": tail, "numbered": numbered,
            "summary": data.summary() if data is not None else "", "limit_s": limit_s,
            "had_data": data is not None and not data.scratch_only,  # (a scratch directory alone: nothing to upload)
            "at": now, "boot": boot_id(), "renewed_at": attempt.accepted_at}


@dataclass(frozen=True)
class Ended:
    """How an attempt's job ended, read back from its mark."""

    status: AgentStatus
    exit_code: int | None
    note_then: str | None
    tail: str
    summary: str
    had_data: bool
    outputs: str | None
    node: int | None
    gpus: int | None
    limit_s: float | None
    at: float
    boot: str | None
    renewed_at: float | None
    numbered: int = 0  # the job's output entries the dead agent numbered (or may have): the resumed ones follow

    @classmethod
    def of(cls, record: object) -> Ended | None:
        """None when ``record`` is missing or not one ``ended`` wrote."""
        if not isinstance(record, dict):
            return None
        try:
            number = lambda key: None if record.get(key) is None else float(record[key])  # noqa: E731
            code, node, gpus = record.get("exit_code"), record.get("node"), record.get("gpus")
            return cls(AgentStatus(record["status"]), None if code is None else int(code), record.get("note"),
                       str(record.get("tail") or ""), str(record.get("summary") or ""), bool(record["had_data"]),
                       record.get("outputs"), None if node is None else int(node), None if gpus is None else int(gpus),
                       number("limit_s"), float(record["at"]), record.get("boot"), number("renewed_at"),
                       int(record.get("numbered") or 0))
        except (KeyError, TypeError, ValueError):
            return None

    def note(self, vm: str) -> str:
        """The resumed report's note: what happened, what was staged, and the note the job's end had."""
        said = f"zen: the agent on VM {vm} died while it uploaded the job's outputs and was restarted; the upload resumed"
        return "\n".join(line for line in (said, self.summary, self.note_then) if line)

    def upload_left(self, now: float) -> float | None:
        """What is left of the upload's budget (``max_runtime_s`` from the job's end); None: unbounded."""
        return None if self.limit_s is None else self.limit_s - max(0.0, now - self.at)


class Finishes(Protocol):
    """``zen.agent.attempt.AttemptRunner.finish``: the upload and final report of an attempt resumed."""

    def finish(self, attempt: AttemptReport, ended: Ended, data: AttemptData | None) -> None: ...


@dataclass
class Resumption:
    """An attempt to resume: its report (with its lease), how its job ended, its directory (locked) if it had one."""

    attempt: AttemptReport
    ended: Ended
    data: AttemptData | None


def take(journal: Journal, left: Sequence[tuple[str, int]], settings: AgentSettings, project: str | None,
         slots: Slots, clock: Callable[[], float]) -> tuple[list[Resumption], list[tuple[str, int, str | None]]]:
    """Of the attempts a dead agent of this VM ran (``Journal.left_running``), those to resume (their directories
    locked, their slots taken), and the others with why each is not resumed (None: its job had not ended)."""
    resumed: list[Resumption] = []
    preempted: list[tuple[str, int, str | None]] = []
    for job_id, number in left:
        end = Ended.of(journal.ended_of(job_id, number))
        if end is None or end.status not in RESUMABLE:
            preempted.append((job_id, number, None))
            continue
        attempt = AttemptReport(job_id, number, accepted_at=end.renewed_at)
        why = why_not(end, attempt, settings, clock())
        data = None
        if why is None and end.had_data:
            data = AttemptData(job_id, number, [], end.outputs, Path(settings.work_dir), project=project, node=end.node)
            why = None if data.reopen() else "its work directory is gone"
        if why is None and slots.take((job_id, number), end.gpus) is None:
            why = "no room for it on this VM"
        if why is None:
            slots.running((job_id, number))  # before the first VM heartbeat: the VM is busy with it
            resumed.append(Resumption(attempt, end, data))
            continue
        if data is not None:
            data.release()
        preempted.append((job_id, number, why))
    return resumed, preempted


def why_not(end: Ended, attempt: AttemptReport, settings: AgentSettings, now: float) -> str | None:
    """Why the upload of an attempt whose job ended cannot be resumed (the VM rebooted, its lease fell), or None."""
    if end.boot is None or end.boot != boot_id():
        return "the VM restarted since its job ended"
    if attempt.accepted_at is None:
        return "no report of it was accepted"
    return fence.fenced(attempt, settings, now, "uploading outputs")


def start(resumption: Resumption, runner: Finishes, controls: ControlRouter, journal: Journal, slots: Slots,
          log: logging.LoggerAdapter[logging.Logger]) -> threading.Thread:
    """Run the resumed upload and the final report in a thread of their own (its slot held meanwhile: its VM says it
    is busy with it, and its control messages reach it); returns the thread, started."""
    attempt = resumption.attempt
    key = (attempt.job_id, attempt.attempt)
    log.warning("an attempt the previous agent ran had ended; its upload resumed", extra={
        "job_id": attempt.job_id, "attempt": attempt.attempt, "status": resumption.ended.status.value,
        "exit_code": resumption.ended.exit_code})
    controls.open(key)

    def finish() -> None:
        try:
            runner.finish(attempt, resumption.ended, resumption.data)
        except Exception:  # noqa: BLE001 - the agent's loop goes on
            log.exception("resumed upload failed", extra={"job_id": attempt.job_id, "attempt": attempt.attempt})
        finally:
            if resumption.data is not None:
                resumption.data.cleanup()
            controls.close(key)
            journal.over(*key)  # a mark left: no final report written; the next agent reports nothing of it
            slots.give_back(key)

    thread = threading.Thread(target=finish, daemon=True, name=f"zen-resume-{attempt.job_id}-{attempt.attempt}")
    thread.start()
    return thread
