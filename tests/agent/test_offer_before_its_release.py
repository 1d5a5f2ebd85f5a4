"""A free VM takes the job of higher priority Zen offers it when its claim of an older job is refused ``outranked``,
whichever of the two messages (the RELEASE, the offer: both on its control subscription, which keeps no order)
reaches it first: an offer read while a claim awaits its answer is kept for after it (it was dropped, and the VM
pulled and ran another older job), also on a VM at its daily job limit, which counts that claim against the limit.
The fake transport runs on a manual clock."""

from __future__ import annotations

from tests.agent import test_agent_loop as loop
from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import make_agent, reports, start_message
from zen.agent.agent import Agent
from zen.agent.limits import DailyPulls, PullLimits
from zen.core.models import AgentStatus, ControlAction, Heartbeat


def offer_first(transport: FakeTransport, on_success=lambda: None) -> None:
    """Two older starts pulled in turn; the first's claim is refused ``outranked``, the job of higher priority offered
    before that RELEASE; every other claim wins (``on_success``: called at a job's SUCCEEDED)."""
    transport.add_start(start_message("low"))
    transport.add_start(start_message("low-2"))

    def answer(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            if message.job_id == "low":  # the offer published after the RELEASE, delivered before it
                transport.offer(start_message("high"))
                return [transport.answer_to(message, ControlAction.RELEASE, refused="outranked")]
            return [transport.answer_to(message, ControlAction.CONFIRM)]
        if isinstance(message, Heartbeat) and message.status is AgentStatus.SUCCEEDED:
            on_success()
        return []

    transport.answer = answer


def test_an_offer_that_comes_before_the_outranked_release_is_taken():
    transport = FakeTransport("vm-test")
    offer_first(transport)
    assert make_agent(transport).run() == 0
    claimed = [job_id for job_id, _, status in reports(transport) if status == "CLAIMED"]
    assert claimed[:2] == ["low", "high"], claimed


def test_a_vm_at_its_daily_job_limit_takes_the_job_offered_before_the_outranked_release():
    """One job left for the day (its claim awaiting an answer counts against the limit): the VM runs the job of higher
    priority, not the next older start it pulls."""
    transport = FakeTransport("vm-test")
    offer_first(transport, on_success=lambda: agent.request_shutdown("test over"))  # its one job of the day ran
    agent = Agent(loop.IDENTITY, loop.SETTINGS, transport, local=True, clock=transport.clock,
                  pulls=DailyPulls(PullLimits(max_jobs=1), 0, transport.clock))
    transport.when_idle = lambda: agent.request_shutdown("test over")
    assert agent.run() == 0
    claimed = [r[0] for r in transport.job_reports() if r[2] == "CLAIMED"]
    assert claimed[:2] == ["low", "high"], claimed  # without: ['low', 'low-2'], the offer dropped
