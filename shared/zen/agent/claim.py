"""Claiming one start message, mixed into ``zen.agent.agent.Agent`` (whose settings, transport,
reporter, controls, clock and log it uses): CLAIMED, the start message kept leased, then wait for
Zen's answer on the control subscription, taking only the answers to this claim's own CLAIMEDs. A
refused claim retires a VM being scaled down, or makes the next pull wait (``zen.agent.backoff``).
The protocol and why: docs/reference/agent.md#the-loop-and-the-claim
"""

from __future__ import annotations

from typing import Mapping

from pydantic import ValidationError

from zen.adapters.message_key import SEALED_KEY_ATTRIBUTE
from zen.agent.attempt import FINAL_BUDGET_S, SHUTDOWN_BUDGET_S, SLICE_S
from zen.agent.backoff import DRAINING
from zen.agent.reports import AttemptReport
from zen.agent.transport import StartDelivery
from zen.core.models import AgentStatus, ControlAction


def about_the_attempt(exc: ValidationError) -> bool:
    """Whether a report failed for its job id or attempt number alone (the start's fault, not this VM's:
    a start is given back when this VM cannot name itself, for another VM to claim)."""
    return all(error["loc"][:1] in (("job_id",), ("attempt",)) for error in exc.errors())


class Claims:
    """``Agent._claim`` (in its own module: the loop's is long enough)."""

    def _claim(self, delivery: StartDelivery, attempt: AttemptReport) -> str:
        """CLAIMED, then wait for the answer. Returns confirm | release | stop | timeout | shutdown."""
        fields = {"job_id": attempt.job_id, "attempt": attempt.attempt}
        # Lease it for our own deadline now, whatever the subscription's ack deadline is.
        lease_every = self.settings.lease_s / 3
        self._quietly(self.transport.extend, delivery, "extend lease", self.settings.lease_s)
        next_lease = self._clock() + lease_every
        first_seq = None
        for try_number in range(1, self.settings.claim_tries + 1):
            self.reporter.job(attempt, AgentStatus.CLAIMED, budget_s=min(10.0, self.settings.claim_timeout_s))
            first_seq = first_seq or attempt.seq
            deadline = self._clock() + self.settings.claim_timeout_s
            while (remaining := deadline - self._clock()) > 0:
                if self.stopping:
                    self._quietly(self.transport.nack, delivery, "nack")
                    # If our claim won, this requeues the attempt now instead of after the deadline.
                    self.reporter.job(attempt, AgentStatus.PREEMPTED, budget_s=SHUTDOWN_BUDGET_S,
                                      message=f"VM {self.identity.vm} is shutting down")
                    return "shutdown"
                if self._clock() >= next_lease:
                    self._quietly(self.transport.extend, delivery, "extend lease", self.settings.lease_s)
                    next_lease = self._clock() + lease_every
                received = self.controls.next((attempt.job_id, attempt.attempt), min(SLICE_S, remaining))
                if received is None:
                    continue
                control, order = received
                control.ack()
                late = _answered(control.attributes)
                if late is not None and late < first_seq:  # to a claim of this attempt given up before
                    self.log.info("late answer to an earlier claim ignored", extra={
                        **fields, "action": order.action.value, "answers": late, "claim_seq": first_seq})
                    continue
                if order.action is ControlAction.CONFIRM:
                    if sealed := control.attributes.get(SEALED_KEY_ATTRIBUTE):  # this VM's MAC key (zen.adapters.message_key)
                        self.transport.learn_mac_key(sealed)
                    self.backoff.confirmed()
                    self.log.info("claim confirmed", extra=fields)
                    self._quietly(self.transport.ack, delivery, "ack")
                    return "confirm"
                self._quietly(self.transport.ack, delivery, "ack")
                self.log.info("claim refused; start message dropped",
                              extra={**fields, "action": order.action.value, "reason": order.reason})
                self._refused(control.attributes.get("refused"), order.reason, fields)
                if order.action is ControlAction.STOP:
                    self.reporter.job(attempt, AgentStatus.STOPPED, budget_s=FINAL_BUDGET_S,
                                      message="stopped before it started")
                    return "stop"
                return "release"
            self.log.warning("no answer to CLAIMED", extra={**fields, "try": try_number})
        self.log.warning("claim unanswered; giving the start message back", extra=fields)
        self._quietly(self.transport.nack, delivery, "nack")
        return "timeout"

    def _refused(self, cause: str | None, reason: str | None, fields: dict) -> None:
        """Zen refused the claim for ``cause`` (``zen.agent.backoff``): being scaled down, take no more
        jobs; else wait longer before the next pull for each claim refused for it in a row."""
        if cause == DRAINING:
            self.pulls.retire(f"Zen is scaling this VM down ({reason})")
        elif cause:
            wait = self.backoff.refused(cause)
            self.log.info("claim refused; waiting before the next pull", extra={
                **fields, "cause": cause, "pause_s": wait})


def _answered(attributes: Mapping[str, str]) -> int | None:
    """The ``seq`` of the report a control message answers (its attribute ``answers``), if it says."""
    try:
        return int(attributes["answers"])
    except (KeyError, ValueError):
        return None
