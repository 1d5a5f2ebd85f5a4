"""Heartbeats the agent sends on ``zen-heartbeats``, with the sequence numbers the scheduler orders by:
a job report's and a VM heartbeat's ``seq`` are epoch milliseconds from one counter, strictly
increasing within the process. A final report is journalled before it is published
(``zen.agent.journal``). Sending never raises; a report Zen would refuse is sent without what it
refuses, and only one whose ids no heartbeat can carry raises ``pydantic.ValidationError``.
Why: docs/reference/agent.md#report-sequence-numbers
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Protocol, Sequence

from pydantic import ValidationError

from zen.agent.identity import Identity
from zen.agent.journal import NOT_FINAL, Journal
from zen.core.errors import ZenError, describe_validation_error
from zen.core.gang_records import GangPlace
from zen.core.lease import STOP_REPORT_S
from zen.core.models import AgentStatus, Heartbeat, Message, VmState
from zen.core.retries import OverLimit
from zen.core.text import escape_unstorable
from zen.core.vm_heartbeat import SEQ_AHEAD_S, HeldAttempt, VmHeartbeat

log = logging.getLogger("zen.agent.reports")
MAX_MESSAGE_CHARS = 8192  # Heartbeat.message
# How long a final report is retried (a lost one costs a rerun): past Zen's heartbeat_timeout_s (120 s), with
# nothing heartbeating meanwhile, it arrives late, and is taken while the next attempt is unclaimed (zen.agent.journal).
FINAL_BUDGET_S = 300.0


def fit_message(text: str | None) -> str | None:
    """What Zen accepts as a heartbeat's message: no NUL (U+FFFD, as the output's undecodable bytes), no
    lone surrogate (escaped, ``\\udce9``: a file name that is not UTF-8 brings one), at most 8192
    characters (the end kept)."""
    if text is None:
        return None
    text = escape_unstorable(text.replace("\x00", "\ufffd"))
    return text if len(text) <= MAX_MESSAGE_CHARS else text[-MAX_MESSAGE_CHARS:]


class Publish(Protocol):
    def __call__(self, message: Message, *, budget_s: float, abandon: Callable[[], bool] = ...) -> None: ...


@dataclass
class AttemptReport:
    """The agent's side of one attempt: which one, the last ``seq`` used for it (``Reporter.job``), by
    when (the agent's clock) Zen must have its final report once a STOP said so (``answer_within_s``),
    and when (the agent's clock) the publish of its last report that Pub/Sub accepted began: what
    renews its lease (``zen.agent.fence``)."""

    job_id: str
    attempt: int
    seq: int = 0
    report_by: float = math.inf
    report_moves: bool = True  # only STOPs whose deadline moves came (zen.core.stops.moves): each one's replaces the last
    report_made: datetime | None = None  # when Zen made (else Pub/Sub published) the STOP whose deadline is report_by
    accepted_at: float | None = None
    gang: GangPlace | None = None  # a gang's node: its place, told by the CONFIRM (zen.core.gang)

    def stopped(self, now: float, within: float, moves: bool, since: datetime | None,
                wall: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        """A STOP came, received at ``now`` (the agent's clock): Zen ends the stopping job without its report
        ``within`` s after it made the STOP, so the upload must end ``STOP_REPORT_S`` sooner (``report_by``).
        ``since``: when Zen made it (its ``zen.core.stops.MADE``: the outbox may publish a STOP later than it made
        it, or twice), else Pub/Sub's publish time (a Zen before it), else None (a fake's, an older transport's:
        counted from ``now``). The STOP's age by the VM's ``wall`` clock is taken off, held to [0, ``within``]. While
        every STOP's deadline moved (``zen.core.stops.moves``) the latest-made STOP's holds, so one published or
        delivered again (or late) never replaces a newer one's (the same STOP's: the earlier deadline); else the
        earliest holds."""
        age = 0.0 if since is None else min(within, max(0.0, (wall() - since).total_seconds()))
        by = now + within - age - STOP_REPORT_S
        self.report_moves = self.report_moves and moves
        if not self.report_moves or (since is not None and since == self.report_made):
            self.report_by = min(self.report_by, by)
        elif since is None or self.report_made is None or since > self.report_made:
            self.report_by, self.report_made = by, since


class Reporter:
    def __init__(self, identity: Identity, publish: Publish, wall_clock: Callable[[], float] = time.time,
                 clock: Callable[[], float] = time.monotonic, journal: Journal | None = None,
                 heartbeat_timeout_s: float | None = None):
        self._identity = identity
        # What its fence is computed from (zen.agent.fence), said in every report of an attempt: Zen waits as long for
        # the attempt, whatever its configuration says since (zen.core.lease.attempt_deadlines). None: not said.
        self._timeout_s = heartbeat_timeout_s
        self.journal = journal  # final reports kept until published (zen.agent.journal); None: none kept
        self._publish = publish
        self._wall_clock = wall_clock
        self._clock = clock  # the agent's, for AttemptReport.accepted_at
        # Above the VM's earlier agents' (a clock stepped back since), unless past what Zen takes (``SEQ_AHEAD_S``: a
        # clock that ran ahead then, whose reports Zen refused): counting above that kept every report refused.
        floor = journal.seq_floor() if journal is not None else 0
        self._seq = floor if floor and floor <= (wall_clock() + SEQ_AHEAD_S) * 1000 else 0
        self._seq_lock = threading.Lock()  # attempts report from threads of their own (several at once)
        self._extra = identity.log_fields()

    def _next_seq(self) -> int:
        """Epoch milliseconds, strictly increasing across every report and VM heartbeat of the process, and of the
        VM's agents before it (kept in the journal: a clock stepped back between them would lower it, and Zen
        would drop the new agent's reports as seen already)."""
        with self._seq_lock:
            self._seq = max(self._seq + 1, int(self._wall_clock() * 1000))
            if self.journal is not None:
                self.journal.drew(self._seq)
            return self._seq

    def job(self, attempt: AttemptReport, status: AgentStatus, *, budget_s: float, exit_code: int | None = None,
            message: str | None = None, data: dict[str, int | float] | None = None,
            abandon: Callable[[], bool] | None = None, over_limit: OverLimit | None = None) -> bool:
        """``data``: the attempt's transfers so far (``staged_bytes`` ...; ``zen.agent.staging``). ``over_limit``:
        the limit the agent stopped the job at (``Heartbeat.over_limit``: not retried). Once
        Pub/Sub accepted it, ``attempt.accepted_at`` is when its publish began. ``abandon``: when it says
        so, a publish still waiting gives up (a RUNNING heartbeat once the VM shuts down: the job's
        SIGTERM must not wait for it)."""
        identity = self._identity
        began = self._clock()
        attempt.seq = self._next_seq()
        sent_at = datetime.now(timezone.utc)

        def heartbeat_with(**optional: Any) -> Heartbeat:
            return Heartbeat(job_id=attempt.job_id, attempt=attempt.attempt, vm=identity.vm, region=identity.region,
                             zone=identity.zone, status=status, seq=attempt.seq, sent_at=sent_at,
                             exit_code=exit_code, over_limit=over_limit, heartbeat_timeout_s=self._timeout_s, **optional)

        try:
            claim: dict[str, Any] = {"gives_way": True} if status is AgentStatus.CLAIMED else {}  # (zen.agent.claim)
            if claim and identity.ip:
                claim["ip"] = identity.ip
            heartbeat = heartbeat_with(message=fit_message(message), tags=list(identity.tags) or None, **claim,
                                       **(data or {}))
        except ValidationError as exc:  # sent without them: a report not sent at all costs the attempt
            heartbeat = heartbeat_with()  # raises when its ids are what no heartbeat can carry
            log.error("heartbeat stripped of its message, tags and data: Zen would refuse them", extra={
                **self._extra, "job_id": attempt.job_id, "attempt": attempt.attempt, "status": status.value,
                "reason": describe_validation_error(exc)})
        kept = self.journal.keep(heartbeat) if self.journal is not None and status not in NOT_FINAL else None
        sent = None
        try:
            sent = self._send(heartbeat, budget_s, abandon, job_id=attempt.job_id, attempt=attempt.attempt,
                              status=status.value, seq=heartbeat.seq)
        finally:  # an agent that dies meanwhile never comes here: the file stays for the next one
            if kept is not None:
                kept.done(sent)
        if sent:
            attempt.accepted_at = began
            if self.journal is not None and status is AgentStatus.RUNNING:  # an ended job's upload: its lease kept
                self.journal.renewed(attempt.job_id, attempt.attempt, began)  # for a restarted agent (zen.agent.resume)
        return sent

    def vm(self, state: VmState, *, budget_s: float, held: Sequence[tuple[str, int]] = (),
           list_all: bool = False, cached: tuple[list[str] | None, list[str] | None] = (None, None),
           given_back: Callable[[], Sequence[tuple[str, int]]] = tuple) -> bool:
        """``held``: the attempts the VM runs, oldest first; the first is named in ``job_id`` /
        ``attempt``, and with ``list_all`` (a VM that may run several) every one in ``jobs``.
        ``cached``: the inputs and images the VM's warm cache holds (``zen.agent.cache``).
        ``given_back``: the attempts whose start the VM dropped (``Slots.dropped``), read once the ``seq`` is
        drawn (``zen.core.vm_heartbeat``: what makes Zen's requeue of them safe)."""
        seq = self._next_seq()
        returned = [HeldAttempt(job_id=j, attempt=a) for j, a in given_back()]
        identity = self._identity
        job_id, attempt = held[0] if held else (None, None)
        heartbeat = VmHeartbeat(
            kind="vm", vm=identity.vm, cluster=identity.cluster, region=identity.region, zone=identity.zone,
            state=state, seq=seq, sent_at=datetime.now(timezone.utc), job_id=job_id, attempt=attempt,
            jobs=[HeldAttempt(job_id=j, attempt=a) for j, a in held] if list_all else None,
            given_back=returned or None, cached_inputs=cached[0], images=cached[1],
        )
        return self._send(heartbeat, budget_s, None, vm_state=state.value, job_id=job_id,
                          jobs=len(held) if list_all else None, given_back=len(returned) or None)

    def _send(self, message: Message, budget_s: float, abandon: Callable[[], bool] | None, **fields: object) -> bool:
        try:
            self._publish(message, budget_s=budget_s, **({"abandon": abandon} if abandon is not None else {}))
        except ZenError as exc:
            log.error("heartbeat not sent", extra={**self._extra, **fields, "error": str(exc)})
            return False
        log.info("heartbeat sent", extra={**self._extra, **fields})
        return True
