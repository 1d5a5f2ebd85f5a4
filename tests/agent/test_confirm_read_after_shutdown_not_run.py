"""A claim's CONFIRM read after the VM's shutdown began (SIGTERM came while the claim waited for it, in the same slice)
does not start the job on the VM going away: the claim ends as one the shutdown cut (PREEMPTED: Zen requeues the
attempt, no attempt spent; named in the STOPPING's ``given_back``), the start acked (the claim won). It started the
job, which the shutdown stopped at once: its container started (its image pulled, minutes for a large one) on a VM
with seconds left, for nothing. On a VM running several jobs at once the claim's thread reads the subscription in
turn with the others; here the VM runs one at a time, its claim the only reader. Real runner, fake transport."""

from __future__ import annotations

import logging
from dataclasses import replace

from tests.agent.fakes import FakeTransport
from tests.agent.test_slots import IDENTITY, SETTINGS, VM, start
from zen.agent.agent import Agent
from zen.agent.slots import Capacity, Slots
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat
from zen.core.vm_heartbeat import HeldAttempt, VmHeartbeat


class ShutdownWithTheAnswer(FakeTransport):
    """The VM's SIGTERM lands while its claim's CONFIRM is on its way: the claim's own read of the control subscription,
    begun before the shutdown, returns it."""

    agent: Agent
    answer_held: ControlMessage | None = None

    def next_control(self, timeout_s):
        if self.answer_held is not None:
            self.controls.append(self.answer_held)
            self.answer_held = None
            self.agent.request_shutdown("preempted")
        return super().next_control(timeout_s)


def test_a_confirm_read_once_the_shutdown_began_does_not_start_the_job(tmp_path, caplog):
    transport = ShutdownWithTheAnswer(VM, virtual_time=False)
    late = transport.add_start(start("late", 4, "--sleep", "30"))

    def scheduler(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            transport.answer_held = ControlMessage(vm=VM, job_id="late", attempt=1, action=ControlAction.CONFIRM,
                                                   reason="won")
        return []

    transport.answer = scheduler
    transport.agent = agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(tmp_path)), transport, local=True,
                                    slots=Slots(Capacity(gpus=8, max_jobs=1)))  # (the claim reads for itself)
    transport.when_idle = lambda: agent.request_shutdown("test over")  # (no start left: never reached with the race)
    with caplog.at_level(logging.INFO, logger="zen.agent"):
        assert agent.run() == 0

    started = [r for r in caplog.records if r.getMessage() == "job started"]
    assert started == [], "the job was started on the VM shutting down"
    assert [r[2] for r in transport.job_reports()] == ["CLAIMED", "PREEMPTED"]
    assert ("ack", late) in transport.calls  # the claim won: Zen publishes the start again as it requeues it
    [stopping] = [m for m in transport.published if isinstance(m, VmHeartbeat) and m.state.value == "STOPPING"]
    assert HeldAttempt(job_id="late", attempt=1) in (stopping.given_back or [])
