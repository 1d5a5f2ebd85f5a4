"""Retries on failure: a JobRequest's ``max_retries`` (with ``retry_exit_codes`` and ``retry_backoff_s``).

A non-zero exit is the job's own failure; with ``max_retries: N`` it runs again, up to N more times, when
its exit code is one of ``retry_exit_codes`` (absent: any non-zero code), each time after a backoff that
doubles (``retry_backoff_s``, default 30: 30, 60, 120 ... s, at most an hour). The failed attempt ends; the job goes back to
PENDING as attempt + 1 with a hold until the backoff is over (``Job.hold``, ``Job.hold_until``), and the
tick lets it go when it is due (``Sweeps.retry_due``). A retry is not a rerun: a lost or preempted
attempt is rerun as before (``max_attempts``), a retry spends neither that budget nor free preemptions;
the history says which attempt failed how. A job whose exit code is not retried, or whose retries are
spent, is FAILED as any job, and so is one the agent stopped at one of its limits (``max_runtime_s``, its
share of the disk): its rerun would run into the same limit, at the price of another run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

OverLimit = Literal["max_runtime_s", "disk"]  # the limits the agent stops a job at (Heartbeat.over_limit)
MAX_BACKOFF_S = 3600
DEFAULT_BACKOFF_S = 30


class RetryFields(BaseModel):
    """A JobRequest's retry fields (mixed into ``zen.core.models.JobRequest``)."""

    max_retries: int | None = Field(default=None, ge=0, le=100, description=(
        "Runs again after a failed exit, at most this many times (zen.core.retries)"))
    retry_exit_codes: list[int] | None = Field(default=None, min_length=1, max_length=64, description=(
        "Exit codes that are retried (absent: any non-zero)"))
    retry_backoff_s: int | None = Field(default=None, ge=0, le=MAX_BACKOFF_S, description=(
        "Seconds before the first retry (default 30), doubling with each"))

    def retry_problem(self) -> str | None:
        if self.max_retries is None and (self.retry_exit_codes is not None or self.retry_backoff_s is not None):
            return "retry_exit_codes and retry_backoff_s need max_retries (how many retries)"
        if never := [code for code in self.retry_exit_codes or () if not 1 <= code <= 255]:  # the agent's codes
            return (f"retry_exit_codes: {never[0]} is no failed run's exit code (1-255; a job killed by signal N "
                    "exits 128+N): it would never be retried")
        return None


@dataclass(frozen=True)
class Retry:
    reason: str
    hold: str
    due: datetime
    count: int  # retries so far, this one included

    def fields(self, attempt: int, max_attempts: int) -> dict[str, Any]:
        """The job row's fields for it: the next attempt (not spent from ``max_attempts``), off its VM, held
        until due. No exit code: the row's is its current attempt's (the failed one's is in the hold and the
        history), else one that ends without a code of its own (lost, a stop unanswered) showed it. The failed
        attempt's message (its last lines) stays while the retry waits; the next claim clears it."""
        return dict(attempt=attempt + 1, max_attempts=max_attempts + 1, vm=None, region=None, zone=None, last_seq=0,
                    last_heartbeat_at=None, started_at=None, exit_code=None, retries=self.count, hold=self.hold,
                    hold_until=self.due, heard_at=None)


class AttemptBudget(BaseModel):
    """A job row's attempt budget (mixed into ``zen.core.models.Job``)."""

    budget: int | None = None  # the attempts it may lose: its max_attempts as submitted (None: a job from before 0052)


class Spent(Protocol):
    """What ``budget_spent`` reads of a job (``zen.core.models.Job``)."""

    @property
    def max_attempts(self) -> int: ...

    @property
    def budget(self) -> int | None: ...

    @property
    def retries(self) -> int: ...

    @property
    def preemptions(self) -> int: ...

    @property
    def nodes(self) -> int: ...


def budget_spent(job: Spent, free_preemptions: int) -> str:
    """Why a job whose last attempt was lost is FAILED: the attempts it lost, its whole ``budget`` (each lost one
    spent one, and the last was lost with none left), and beside them those that spent none, each of which raised
    ``max_attempts`` by one: its retries, its free preemptions (the cloud's first ``free_preemptions``, and every
    one by its queue) and a gang's attempts retried as it did not assemble (in time, or a node gave its part
    back). "2 of 2 attempts lost" was one of 1. Of a gang preempted more than ``free_preemptions`` times, which
    preemptions spent an attempt is not kept: its free ones and its assemblies are said together. A job from
    before its budget was kept (``budget`` None): as said then, each preemption past the free ones taken as lost."""
    retries = job.retries
    if job.budget is None:
        free = min(job.preemptions, free_preemptions)
        budget = job.max_attempts - retries - free
    else:
        budget, free = job.budget, job.max_attempts - job.budget - retries
    if job.nodes == 1 or job.budget is None:  # one VM: only a preemption reruns it unspent
        kinds = [(free, "preempted free")]
    elif job.preemptions <= free_preemptions:  # each of the gang's preemptions was free
        kinds = [(job.preemptions, "preempted free"), (free - job.preemptions, "retried as the gang did not assemble")]
    else:
        kinds = [(free, "preempted free or retried as the gang did not assemble")]
    aside = [f"{n} {what}" for n, what in [(retries, "retried"), *kinds] if n > 0]
    return f"attempt budget spent ({budget} of {budget} attempts lost" + (f", besides {' and '.join(aside)})" if aside else ")")


class Failure(Protocol):
    """How an attempt failed: a final report (``Heartbeat``) or a gang node's record of its own."""

    @property
    def exit_code(self) -> int | None: ...

    @property
    def over_limit(self) -> str | None: ...


def next_retry(request: dict[str, Any], retries: int, attempt: int, failure: Failure,
               now: datetime) -> Retry | None:
    """The retry an attempt's ``failure`` earns (None: it is FAILED). ``retries``: those made so far. A job
    the agent stopped at one of its limits (``max_runtime_s``, its share of the disk) is not retried, whatever
    its exit code (its SIGTERM's 143): it would run into the limit again, at the price of another run."""
    most, exit_code = int(request.get("max_retries") or 0), failure.exit_code
    if retries >= most or not _retried_kind(request, failure):
        return None
    backoff = request.get("retry_backoff_s")
    wait = min((DEFAULT_BACKOFF_S if backoff is None else int(backoff)) * 2 ** retries, MAX_BACKOFF_S)
    due = now + timedelta(seconds=wait)
    count = retries + 1
    how = ended(exit_code, None, None, "", getattr(failure, "message", None))  # a final report's: out of memory?
    reason = (f"attempt {attempt} {'failed with' if how.startswith('exit code') else 'was'} {how}: retry {count} of "
              f"{most}" + (f" after {wait} s" if wait else ""))
    return Retry(reason, f"retry {count} of {most} after exit code {exit_code}, due {due:%H:%M:%S} UTC", due, count)


def retries_spent(request: dict[str, Any], retries: int, failure: Failure) -> str | None:
    """What a FAILED's reason adds when ``next_retry`` would have retried ``failure`` but the job's ``max_retries`` were
    all made (its end said "exit code 3" alone, as for a job that asked for none), else None."""
    most = int(request.get("max_retries") or 0)
    if most == 0 or retries < most or not _retried_kind(request, failure):
        return None
    return f"its {most} retr{'y' if most == 1 else 'ies'} (max_retries) made"


def _retried_kind(request: dict[str, Any], failure: Failure) -> bool:
    """Whether ``failure`` is one a retry is for: an exit code of its own, not 0, not at one of the job's limits, and
    among its ``retry_exit_codes`` when it lists them."""
    exit_code, wanted = failure.exit_code, request.get("retry_exit_codes")
    return exit_code not in (None, 0) and failure.over_limit is None and (wanted is None or exit_code in wanted)


def rerun_as_taken_back(succeeded: bool, over_limit: str | None) -> bool:
    """Whether the final report of an attempt its queue is taking back is rerun as the preemption would be
    (a failure, maybe the stop's own): not a success, nor a kill at one of the job's limits, which is FAILED
    as it would have been without the preemption (its rerun would run into the same limit)."""
    return not succeeded and over_limit is None


OUT_OF_MEMORY = "killed: out of memory"  # the kernel's doing, as the agent's final report begins (container.exit_note)


NOTE_CHARS = 500  # the agent's note said as an attempt's end (``ended``): its first line, at most this long


def ended(exit_code: int | None, over_limit: str | None, max_runtime_s: int | None, otherwise: str,
          message: str | None = None) -> str:
    """Why an attempt ended, for the job's history and ``zen explain``: the limit the agent stopped it at, with its
    exit code (a plain "exit code 143", or "exit code 0" for a job that saved its work on SIGTERM and exited cleanly,
    read as a failure of its own, or a contradiction); else its exit code, said to be out of memory where the
    agent's final report ``message`` begins so (``zen.agent.container.exit_note``); else, with no exit code (its
    command never ran: its secrets, inputs, checkpoint or image, ``zen.agent.prestart``), the agent's note that
    ended it (``never_ran``); else ``otherwise`` (a final report without a note, an older agent's)."""
    code = f"exit code {exit_code}" if exit_code is not None else None
    note = never_ran(message) if code is None else None
    if over_limit == "max_runtime_s":
        return f"stopped at max_runtime_s={max_runtime_s}" + (f" ({code})" if code else f": {note}" if note else "")
    if over_limit is not None:  # "disk": its share of the VM's disk (zen.agent.diskquota)
        return "stopped at its share of the disk" + (f" ({code})" if code else f": {note}" if note else "")
    first = (message or "").split("\n", 1)[0]
    if code and first.startswith("zen: ") and OUT_OF_MEMORY in first:
        return f"{OUT_OF_MEMORY} ({code})" if first.startswith(f"zen: {OUT_OF_MEMORY}") else (
            f"{code}, after one of its processes was {OUT_OF_MEMORY}")
    return code or note or otherwise


def never_ran(message: str | None) -> str | None:
    """The agent's note that ended an attempt before its command ran, read from its final report's ``message``
    (``zen.agent.attempt.AttemptRunner._end``): that note comes first, then at most its staging's summary line, and no
    output (none ran); its first line, "zen: " dropped, at most ``NOTE_CHARS``. None when the message does not begin
    with the agent's note (empty; a note longer than the report's preface, cut at its start)."""
    first = (message or "").split("\n", 1)[0].strip()
    if not first.startswith("zen: ") or not (note := first.removeprefix("zen: ").strip()):
        return None
    return note if len(note) <= NOTE_CHARS else note[:NOTE_CHARS - 1] + "…"

