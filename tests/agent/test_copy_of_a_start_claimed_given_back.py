"""A shared VM pulls while one of its claims awaits Zen's answer, and may pull another copy of the start it claims: the
one Zen publishes again as it refuses that claim (a cause other than ``outranked``: ``zen.jobs.claims``), or the same
message Pub/Sub delivers again. Dropped (acked) as a copy of a start held, that copy was gone, and the claim then ended
without a win (its start acked on the RELEASE, or given back after its copy acked the message): the job waited QUEUED
with no start until ``start_republish_s``. A copy of a start whose claim is not confirmed is given back instead. Real
runner, fake transport whose Pub/Sub hands a start given back to the next pull."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from tests.agent.fakes import FakeTransport
from tests.agent.test_outranked_start_given_back_after_its_slot import run_two_slots
from tests.agent.test_slots import VM, start
from zen.core.models import AgentStatus, ControlAction, Heartbeat


class PubSub(FakeTransport):
    """A start given back is delivered again to the next pull with a new ack id, unless its message was acked (under
    any ack id); ``after_the_copy`` reaches the control subscription once the copy ``copy`` names is settled."""

    def __init__(self, vm: str):
        super().__init__(vm, virtual_time=False)
        self.acked: set[str] = set()
        self.copy: str | None = None  # the ack id of the copy of the start claimed
        self.after_the_copy: list = []
        self._again = itertools.count(1)

    def deliver_again(self, delivery) -> str:
        again = dataclasses.replace(delivery, ack_id=f"again-{next(self._again)}",
                                    delivery_attempt=delivery.delivery_attempt + 1)
        self.starts.append(again)
        return again.ack_id

    def nack(self, delivery):
        super().nack(delivery)
        if delivery.offer is None and delivery.message_id not in self.acked:
            self.deliver_again(delivery)
        self._settled(delivery)

    def ack(self, delivery):
        super().ack(delivery)
        self.acked.add(delivery.message_id)
        self._settled(delivery)

    def _settled(self, delivery):
        if delivery.ack_id == self.copy:
            self.controls.extend(self.after_the_copy)
            self.after_the_copy = []


@pytest.mark.parametrize("copy", ["published again", "delivered again"])
def test_a_copy_of_a_start_pulled_while_its_claim_awaits_the_answer_is_not_dropped(copy):
    """8 GPUs, two slots. The first claim of "low" (4 GPUs) is refused: "no-room", Zen publishing its start again;
    or ``outranked``, "high" offered instead, while Pub/Sub delivers the start again. The VM pulls that copy before
    the RELEASE comes. Every other claim wins: "low" runs, once."""
    transport = PubSub(VM)
    transport.add_start(start("low", 4))
    first = transport.starts[0]
    claims: list[str] = []

    def scheduler(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            claims.append(message.job_id)
            if claims != ["low"]:
                return [transport.answer_to(message, ControlAction.CONFIRM)]
            if copy == "published again":
                transport.copy = transport.add_start(start("low", 4))
                transport.after_the_copy.append(transport.answer_to(message, ControlAction.RELEASE, refused="no-room"))
            else:
                transport.copy = transport.deliver_again(first)
                transport.offer(start("high", 4))
                transport.after_the_copy += [transport.controls.pop(), transport.answer_to(
                    message, ControlAction.RELEASE, refused="outranked")]
        return []

    transport.answer = scheduler
    run_two_slots(transport, claim_timeout_s=5, runs=1 if copy == "published again" else 2, within_s=10)
    ended = [r[0] for r in transport.job_reports() if r[2] == "SUCCEEDED"]
    assert ended.count("low") == 1, (claims, transport.calls)  # without: the copy acked, "low" never ran
