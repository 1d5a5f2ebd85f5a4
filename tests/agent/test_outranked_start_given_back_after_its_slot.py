"""A shared VM gives a start back for another claim when Zen refuses its claim ``outranked``
(``zen.jobs.claims.outranked``: Zen publishes it no more, so that copy is the job's only one), or when its claim went
unanswered (Zen may never have heard it). Pub/Sub may hand that start straight back to this VM's own pull, which must
find its slot free, not a start this VM still holds (a copy of one held is dropped: acked, gone, the job left QUEUED
with no start until ``start_republish_s``). Real runner, fake transport whose Pub/Sub hands a start given back to the
next pull at once."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from tests.agent.fakes import FakeTransport
from tests.agent.test_slots import IDENTITY, SETTINGS, VM, start
from zen.agent.agent import Agent
from zen.agent.slots import Capacity, Slots
from zen.core.models import AgentStatus, ControlAction, Heartbeat


class PubSubRedelivers(FakeTransport):
    """A start given back is delivered again to the next pull, here this VM's, and the nack's call returns once
    that pull's delivery is settled (or after 1 s); ``after_the_nack`` reaches the control subscription then."""

    def __init__(self, vm: str):
        super().__init__(vm, virtual_time=False)
        self.given_back: set[str] = set()
        self.settled = threading.Event()
        self.after_the_nack: list = []

    def nack(self, delivery):
        super().nack(delivery)
        if delivery.offer is None and delivery.ack_id not in self.given_back:
            self.given_back.add(delivery.ack_id)
            self.starts.appendleft(delivery)
            self.settled.wait(1.0)
            self.controls.extend(self.after_the_nack)

    def ack(self, delivery):
        super().ack(delivery)
        if delivery.ack_id in self.given_back:
            self.settled.set()


@pytest.mark.parametrize("answer", ["outranked", "unanswered"])
def test_a_start_given_back_and_pulled_again_at_once_by_its_vm_is_claimed_again(answer):
    """8 GPUs, two slots: the first claim of "low" (4 GPUs) is refused ``outranked``, "high" (4 GPUs) offered
    instead, or is not answered; every other claim wins. Both jobs run: "low" is not dropped as a copy of a start
    held."""
    transport = PubSubRedelivers(VM)
    transport.add_start(start("low", 4))
    claims: list[str] = []

    def scheduler(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            claims.append(message.job_id)
            if claims == ["low"] and answer == "unanswered":
                return []
            if claims == ["low"]:
                transport.offer(start("high", 4))  # reaches the VM after the start given back reached its pull
                transport.after_the_nack.append(transport.controls.pop())
                return [transport.answer_to(message, ControlAction.RELEASE, refused="outranked")]
            return [transport.answer_to(message, ControlAction.CONFIRM)]
        return []

    transport.answer = scheduler
    run_two_slots(transport, claim_timeout_s=0.5, runs=2 if answer == "outranked" else 1, within_s=8)
    ended = {r[0] for r in transport.job_reports() if r[2] == "SUCCEEDED"}
    assert "low" in ended, (claims, transport.calls)  # without: the start given back acked at its next pull


def run_two_slots(transport, *, claim_timeout_s: float, runs: int, within_s: float) -> Agent:
    """The real agent loop on a VM of 8 GPUs and two slots, one try a claim, until it ran ``runs`` jobs or
    ``within_s`` passed."""
    settings = dataclasses.replace(SETTINGS, claim_timeout_s=claim_timeout_s, claim_tries=1)
    agent = Agent(IDENTITY, settings, transport, local=True, slots=Slots(Capacity(gpus=8, max_jobs=2)))
    deadline = time.monotonic() + within_s
    transport.when_idle = lambda: (agent.jobs_run >= runs or time.monotonic() > deadline) and agent.request_shutdown(
        "test over")
    assert agent.run() == 0
    return agent
