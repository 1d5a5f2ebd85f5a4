"""Claiming one start message (``Claimer``): CLAIMED, the start message kept leased, then wait for
Zen's answer on the control subscription, taking only the answers to this claim's own CLAIMEDs. A
refused claim retires a VM being scaled down, or makes the next pull wait (``zen.agent.backoff``).
The protocol and why: docs/reference/agent.md#the-loop-and-the-claim
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Callable, Literal, Mapping

from pydantic import ValidationError

from zen.adapters.message_key import SEALED_KEY_ATTRIBUTE
from zen.agent import fence
from zen.agent.backoff import DRAINING, OUTRANKED, ClaimBackoff
from zen.agent.leases import Leases
from zen.agent.limits import DailyPulls
from zen.agent.reports import FINAL_BUDGET_S, AttemptReport, Reporter
from zen.agent.settings import AgentSettings
from zen.agent.shutdown import SHUTDOWN_BUDGET_S, SLICE_S, Shutdown
from zen.agent.slots import ControlRouter
from zen.agent.transport import StartDelivery
from zen.core.models import AgentStatus, ControlAction, StartMessage

if TYPE_CHECKING:
    from zen.agent.transport import Transport

# "outranked" (released for a job of higher priority) and "timeout": the caller gives the start back once its slot is
# free (Pub/Sub may hand it at once to this VM's own pull, which drops a copy of a start held: zen.agent.agent)
Answer = Literal["confirm", "release", "outranked", "stop", "timeout", "shutdown", "fenced"]


def about_the_attempt(exc: ValidationError) -> bool:
    """Whether a report failed for its job id or attempt number alone (the start's fault, not this VM's:
    a start is given back when this VM cannot name itself, for another VM to claim)."""
    return all(error["loc"][:1] in (("job_id",), ("attempt",)) for error in exc.errors())


class Claimer:
    """Claims the starts the loop takes, one per attempt's thread (``claim``)."""

    def __init__(self, settings: AgentSettings, transport: Transport, leases: Leases, reporter: Reporter,
                 controls: ControlRouter, backoff: ClaimBackoff, pulls: DailyPulls, shutdown: Shutdown,
                 vm: str, clock: Callable[[], float], log: logging.LoggerAdapter[logging.Logger]) -> None:
        self._settings = settings
        self._transport = transport  # only to learn the VM's MAC key from a CONFIRM
        self._leases = leases
        self._reporter = reporter
        self._controls = controls
        self._backoff = backoff
        self._pulls = pulls
        self._shutdown = shutdown
        self._vm = vm
        self._clock = clock
        self._log = log

    def claim(self, delivery: StartDelivery, attempt: AttemptReport, start: StartMessage) -> Answer:
        """CLAIMED, then wait for the answer. Returns confirm | release | outranked | stop | timeout | shutdown (the
        VM's shutdown began before the answer, or as it was read, or a host maintenance's notice came before it and
        its job would not surely end before GCE's stop: ``Shutdown.before_start``; reported PREEMPTED, not run: a
        gang's node so leaves the gang it waits for, for another VM) | fenced (confirmed after the lease it gave ran
        out: reported PREEMPTED, not run). The start is acked or nacked, but for outranked and timeout (``Answer``).
        A gang's node waits ``start.assemble_s`` at least (its CONFIRM comes once the last node claims)."""
        fields, wait_s = {"job_id": attempt.job_id, "attempt": attempt.attempt}, start.assemble_s
        # Lease it for our own deadline now, whatever the subscription's ack deadline is.
        lease_every = self._settings.lease_s / 3
        self._leases.extend(delivery, self._settings.lease_s)
        next_lease = self._clock() + lease_every
        first_seq = 0  # the seq of this claim's first CLAIMED, once sent
        sent: dict[int, float] = {}  # when (the agent's clock) the publish of each of its CLAIMEDs began
        tries, every_s = self._settings.claim_tries, self._settings.claim_timeout_s
        if wait_s:  # CLAIMED again meanwhile: Zen answers the last once the gang is complete, and the lease counts
            # from the CLAIMED answered, so it goes again within half the fence, not only every claim_timeout_s (a
            # fence under it, from a short heartbeat_timeout_s, saw a node's CONFIRM come after its lease: not run)
            every_s = min(every_s, max(1.0, fence.fence_s(self._settings) / 2))
            tries = max(tries, math.ceil(wait_s / every_s) + 1)
        for try_number in range(1, tries + 1):
            began = self._clock()
            self._reporter.job(attempt, AgentStatus.CLAIMED, budget_s=min(10.0, self._settings.claim_timeout_s))
            first_seq = first_seq or attempt.seq
            sent[attempt.seq] = began
            deadline = self._clock() + every_s
            while (remaining := deadline - self._clock()) > 0:
                noticed = None if self._shutdown.stopping else self._shutdown.before_start(self._vm, start)
                if self._shutdown.stopping or noticed is not None:
                    self._leases.nack(delivery)
                    if noticed is not None:
                        self._log.info("claim given back at a host maintenance's notice", extra=fields)
                    # If our claim won, this requeues the attempt now instead of after the deadline.
                    self._reporter.job(attempt, AgentStatus.PREEMPTED, budget_s=SHUTDOWN_BUDGET_S, message=noticed
                                       or self._shutdown.said(self._vm, f"VM {self._vm} is shutting down"))
                    return "shutdown"
                if self._clock() >= next_lease:
                    self._leases.extend(delivery, self._settings.lease_s)
                    next_lease = self._clock() + lease_every
                received = self._controls.next((attempt.job_id, attempt.attempt), min(SLICE_S, remaining))
                if received is None:
                    continue
                control, order = received
                control.ack()
                late = _answered(control.attributes)
                if late is not None and late < first_seq:  # to a claim of this attempt given up before
                    self._log.info("late answer to an earlier claim ignored", extra={
                        **fields, "action": order.action.value, "answers": late, "claim_seq": first_seq})
                    continue
                if order.action is ControlAction.CONFIRM:
                    if sealed := control.attributes.get(SEALED_KEY_ATTRIBUTE):  # this VM's MAC key (zen.adapters.message_key)
                        self._transport.learn_mac_key(sealed)
                    self._backoff.confirmed()
                    attempt.gang = order.gang  # a gang's node: its rank and peers (zen.core.gang)
                    # The lease starts when the CLAIMED answered was sent, not when the answer came, nor at a
                    # later try Pub/Sub took (Zen may have heard it after it took the attempt for lost: an agent
                    # that hung while the answer waited ran it beside the rerun); no answer named: the first.
                    if late in sent or attempt.accepted_at is None:
                        attempt.accepted_at = sent[late] if late in sent else sent[first_seq]
                    self._leases.ack(delivery)
                    if (left := fence.fence_left(attempt, self._settings, self._clock())) <= 0:
                        self._log.warning("claim confirmed after its lease ran out: not run", extra={
                            **fields, "late_s": -left})
                        self._reporter.job(attempt, AgentStatus.PREEMPTED, budget_s=FINAL_BUDGET_S, message=(
                            f"zen: VM {self._vm} read the answer to its claim {-left:.0f} s after its lease ran out "
                            "(it hung or was starved): not run, Zen may have run it elsewhere"))
                        return "fenced"
                    if self._shutdown.stopping:  # read as the shutdown began (the same slice): not run on a VM going
                        self._log.info("claim confirmed as the VM shuts down: not run", extra=fields)  # away
                        self._reporter.job(attempt, AgentStatus.PREEMPTED, budget_s=SHUTDOWN_BUDGET_S,
                                           message=self._shutdown.said(self._vm, f"VM {self._vm} is shutting down"))
                        return "shutdown"
                    self._log.info("claim confirmed", extra={**fields, **(
                        {"rank": order.gang.rank, "nodes": order.gang.nodes} if order.gang else {})})
                    return "confirm"
                outranked = control.attributes.get("refused") == OUTRANKED and order.action is ControlAction.RELEASE
                if outranked:
                    # For another VM, given back by the caller (Answer): Zen does not publish it again (zen.jobs.claims)
                    self._log.info("claim outranked; start given back", extra={**fields, "reason": order.reason})
                else:
                    self._leases.ack(delivery)
                    self._log.info("claim refused; start message dropped",
                                   extra={**fields, "action": order.action.value, "reason": order.reason})
                self._refused(control.attributes.get("refused"), order.reason, fields)
                if outranked:
                    return "outranked"
                if order.action is ControlAction.STOP:
                    self._reporter.job(attempt, AgentStatus.STOPPED, budget_s=FINAL_BUDGET_S,
                                       message="stopped before it started")
                    return "stop"
                return "release"
            self._log.warning("no answer to CLAIMED", extra={**fields, "try": try_number})
        self._log.warning("claim unanswered; giving the start message back", extra=fields)
        return "timeout"  # given back by the caller, once its slot is free

    def _refused(self, cause: str | None, reason: str | None, fields: dict[str, object]) -> None:
        """Zen refused the claim for ``cause`` (``zen.agent.backoff``): being scaled down, take no more
        jobs; outranked, wait for the start offered instead; else wait longer before the next pull for each claim
        refused for it in a row."""
        if cause == DRAINING:
            self._pulls.retire(f"Zen is scaling this VM down ({reason})")
        elif cause == OUTRANKED:  # a job of higher priority is offered to this VM: taken before any pull
            self._backoff.outranked()
            self._log.info("claim outranked; waiting for the start offered", extra={**fields, "reason": reason})
        elif cause:
            wait = self._backoff.refused(cause)
            self._log.info("claim refused; waiting before the next pull", extra={
                **fields, "cause": cause, "pause_s": wait})


def _answered(attributes: Mapping[str, str]) -> int | None:
    """The ``seq`` of the report a control message answers (its attribute ``answers``), if it says."""
    try:
        return int(attributes["answers"])
    except (KeyError, ValueError):
        return None
