"""A free VM takes the job of higher priority Zen offers it when its claim of an older job is refused ``outranked``,
whichever of the two messages (the RELEASE, the offer: both on its control subscription, which keeps no order)
reaches it first: an offer read while a one-job VM's claim awaits its answer is kept for after it (it was dropped, and
the VM pulled and ran another older job). The fake transport runs on a manual clock."""

from __future__ import annotations

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import make_agent, reports, start_message
from zen.core.models import AgentStatus, ControlAction, Heartbeat


def test_an_offer_that_comes_before_the_outranked_release_is_taken():
    transport = FakeTransport("vm-test")
    transport.add_start(start_message("low"))
    transport.add_start(start_message("low-2"))

    def answer(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            if message.job_id == "low":  # the offer published after the RELEASE, delivered before it
                transport.offer(start_message("high"))
                return [transport.answer_to(message, ControlAction.RELEASE, refused="outranked")]
            return [transport.answer_to(message, ControlAction.CONFIRM)]
        return []

    transport.answer = answer
    assert make_agent(transport).run() == 0
    claimed = [job_id for job_id, _, status in reports(transport) if status == "CLAIMED"]
    assert claimed[:2] == ["low", "high"], claimed
