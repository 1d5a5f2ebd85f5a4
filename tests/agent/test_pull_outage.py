"""An agent that cannot pull its start subscription (NotFound, PermissionDenied) must not say IDLE:
the planner counts an IDLE VM as supply for its region's queued jobs, which then waited for ever
while the VM was billed. Past ``PULL_OUTAGE_S`` of failing pulls it sends no IDLE
heartbeat, so Zen, hearing nothing for ``agent_silence_s``, deletes the VM; once a pull works it
says IDLE again at once. On the fake transport's manual clock."""

from __future__ import annotations

from dataclasses import replace

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from zen.agent.agent import Agent
from zen.core.config import Deadlines
from zen.core.lease import agent_silence_s
from zen.core.models import Heartbeat

AGENT_VM_HEARTBEAT_S = Deadlines().vm_heartbeat_s

BEATING = replace(SETTINGS, vm_heartbeat_s=AGENT_VM_HEARTBEAT_S)
SAYS_IDLE_AT_MOST_S = 2 * AGENT_VM_HEARTBEAT_S  # while pulls fail (zen.agent.outage.PULL_OUTAGE_S)


class Timed(FakeTransport):
    """Records when (the manual clock) each VM heartbeat was sent, and its state."""

    def __init__(self):
        super().__init__(VM)
        self.beats: list[tuple[float, str]] = []

    def publish(self, message, *, budget_s: float, **abandon) -> None:
        super().publish(message, budget_s=budget_s)
        if not isinstance(message, Heartbeat):
            self.beats.append((self.clock.now, message.state.value))


def test_the_bound_outlasts_a_brief_outage_and_is_below_the_silence_zen_judges():
    from zen.agent.outage import PULL_OUTAGE_S

    assert AGENT_VM_HEARTBEAT_S < PULL_OUTAGE_S <= SAYS_IDLE_AT_MOST_S < agent_silence_s(0, AGENT_VM_HEARTBEAT_S)


def test_an_agent_whose_pulls_keep_failing_stops_saying_idle_and_says_it_again_once_they_work():
    transport = Timed()
    transport.fail_pull = 20  # NotFound for a while: about 10 minutes of backoff (at most 60 s apart)
    transport.add_start(start_message())  # what the first pull that works brings
    transport.answer = confirm_claims(VM)
    agent = Agent(IDENTITY, BEATING, transport, local=True, clock=transport.clock)
    idle_pulls = []
    transport.when_idle = lambda: idle_pulls.append(transport.clock.now) or (
        len(idle_pulls) > 1 and agent.request_shutdown("test over"))
    started = transport.clock.now

    assert agent.run() == 0

    recovered = next(at for at, state in transport.beats if state == "BUSY")  # the first pull that worked
    assert recovered - started > 5 * 60
    failing = [(at, state) for at, state in transport.beats if at < recovered]
    assert failing and all(state == "IDLE" for _, state in failing)
    assert max(at for at, _ in failing) - started <= SAYS_IDLE_AT_MOST_S  # no IDLE past the bound...
    assert recovered - max(at for at, _ in failing) > agent_silence_s(0, AGENT_VM_HEARTBEAT_S)  # ...long enough for Zen to drop the VM
    assert agent.jobs_run == 1  # it pulled and ran the job once pulls worked, then says IDLE again
    assert [state for at, state in transport.beats if at >= recovered][-2:] == ["IDLE", "STOPPING"]


def test_a_brief_pull_failure_never_silences_the_agent():
    transport = Timed()
    transport.fail_pull = 3
    agent = Agent(IDENTITY, BEATING, transport, local=True, clock=transport.clock)
    transport.when_idle = lambda: transport.clock.now > 1000 + 10 * 60 and agent.request_shutdown("test over")

    assert agent.run() == 0

    idle = [at for at, state in transport.beats if state == "IDLE"]
    assert all(later - earlier <= AGENT_VM_HEARTBEAT_S + 1 for earlier, later in zip(idle, idle[1:]))
    assert idle[-1] - idle[0] > 9 * 60
