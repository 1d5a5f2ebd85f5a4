"""A free VM takes the job of higher priority Zen offers it when its claim of an older job is refused ``outranked``
(``zen.jobs.claims.outranked``), also where the refused claim's own slot is what leaves no room for it now.

On a VM shared by several jobs (``max_jobs_per_vm``) Zen gives way only where the higher job would not fit beside
the claimed one (``zen.jobs.claims._crowds_out``): the offer comes while the refused claim still holds its GPUs (its
start's nack, a Pub/Sub call, comes first), and must wait for them, not be dropped for want of them. Real runner,
fake transport."""

from __future__ import annotations

import time

import pytest

from tests.agent.fakes import FakeTransport
from tests.agent.test_slots import IDENTITY, SETTINGS, VM, start
from zen.agent.agent import Agent
from zen.agent.slots import Capacity, Slots
from zen.core.models import AgentStatus, ControlAction, Heartbeat


class PubSubPaced(FakeTransport):
    """Giving a pulled start back is a call to Pub/Sub (``modify_ack_deadline``): tens of milliseconds."""

    def nack(self, delivery):
        if delivery.offer is None:
            time.sleep(0.05)
        super().nack(delivery)


@pytest.mark.parametrize("offer_first", [False, True], ids=["release-then-offer", "offer-then-release"])
def test_a_shared_vm_takes_the_whole_vm_job_offered_instead_of_its_outranked_claim(offer_first):
    """8 GPUs, two slots: the VM pulls a 4-GPU job of priority 0; Zen refuses its claim ``outranked`` and offers it
    a job of the whole VM (priority 5: it fits on the VM now, not beside the 4-GPU one); every other claim wins."""
    transport = PubSubPaced(VM, virtual_time=False)
    transport.add_start(start("low", 4))

    def scheduler(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            if message.job_id == "low":
                release = transport.answer_to(message, ControlAction.RELEASE, refused="outranked")
                if not offer_first:
                    transport.controls.append(release)  # as Zen publishes them: the RELEASE, then the offer
                transport.offer(start("whole", None))
                if offer_first:
                    transport.controls.append(release)
                return []
            return [transport.answer_to(message, ControlAction.CONFIRM)]
        return []

    transport.answer = scheduler
    agent = Agent(IDENTITY, SETTINGS, transport, local=True, slots=Slots(Capacity(gpus=8, max_jobs=2)))
    deadline = time.monotonic() + 8
    transport.when_idle = lambda: (agent.jobs_run >= 1 or time.monotonic() > deadline) and agent.request_shutdown(
        "test over")
    assert agent.run() == 0
    claimed = [r[0] for r in transport.job_reports() if r[2] == "CLAIMED"]
    assert claimed == ["low", "whole"], claimed  # without: ['low'], the offer given back "no room for the job now"
    assert ("whole", 1, "SUCCEEDED") in {r[:3] for r in transport.job_reports()}
