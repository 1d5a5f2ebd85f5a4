"""What an idle agent costs the VM it shares with the jobs: its loop wakes a bounded number of times a second (one
pull each ``poll_s``, one wait each ``SLICE_S`` in between), counted on a manual clock. Measured on a 2-core
machine, an idle agent took 0.06 % of a core with a fake transport, 0.55 % with the real Pub/Sub client
(docs/reference/agent.md#what-the-agent-costs-the-vm)."""

from __future__ import annotations

from dataclasses import replace

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import IDENTITY, SETTINGS
from zen.agent.agent import Agent
from zen.agent.shutdown import SLICE_S

IDLE_S = 60.0
MOST_CALLS = 10_000  # a loop spinning without waiting is cut here (the manual clock never moves on)


class CountingTransport(FakeTransport):
    def __init__(self, vm: str):
        super().__init__(vm)
        self.pulls = 0
        self.waits = 0
        self.stop = lambda: None
        self.began = self.clock()

    def idle_s(self) -> float:
        return self.clock() - self.began

    def pull_start(self):
        self.pulls += 1
        return self._counted(super().pull_start())

    def next_control(self, timeout_s: float):
        self.waits += 1
        return self._counted(super().next_control(timeout_s))

    def _counted(self, result):
        if self.idle_s() >= IDLE_S or self.pulls + self.waits >= MOST_CALLS:
            self.stop()
        return result


def test_an_idle_agent_pulls_once_a_poll_and_waits_in_slices_between():
    transport = CountingTransport("vm-test")
    settings = replace(SETTINGS, poll_s=1.0)
    agent = Agent(IDENTITY, settings, transport, local=True, clock=transport.clock)
    transport.stop = lambda: agent.request_shutdown("idle long enough")

    assert agent.run() == 0

    assert transport.idle_s() >= IDLE_S, (transport.pulls, transport.waits)  # not cut for spinning
    assert transport.pulls <= IDLE_S / settings.poll_s + 1
    assert transport.waits <= IDLE_S / SLICE_S + transport.pulls + 1
