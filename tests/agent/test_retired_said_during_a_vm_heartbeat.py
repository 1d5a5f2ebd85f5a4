"""A VM running several jobs at once says RETIRED at once when it stops taking jobs, also while another attempt's
thread is sending a VM heartbeat (``zen.agent.vmbeat``). The loop asks for the next VM heartbeat now (``due``) as it
retires; the heartbeat under way then set its own next one a period later, over that ask: the VM went on saying BUSY,
taking jobs to Zen, for a whole ``ZEN_AGENT_VM_HEARTBEAT_S`` (unless an attempt ended meanwhile). Real loop, fake
transport."""

from __future__ import annotations

import threading
from dataclasses import replace

from tests.agent.fakes import FakeTransport
from tests.agent.helpers import wait_for
from tests.agent.test_slots import IDENTITY, SETTINGS, VM
from zen.agent.agent import Agent
from zen.agent.slots import Capacity, Slots
from zen.core.vm_heartbeat import VmHeartbeat


class HeldPublish(FakeTransport):
    """The next VM heartbeat's publish waits for ``go`` (a slow Pub/Sub call); ``sending`` is set as it begins."""

    def __init__(self, vm: str):
        super().__init__(vm, virtual_time=False)
        self.hold, self.sending, self.go = False, threading.Event(), threading.Event()

    def publish(self, message, **options):
        if self.hold and isinstance(message, VmHeartbeat):
            self.hold = False
            self.sending.set()
            assert self.go.wait(10)
        super().publish(message, **options)


def busy_agent(tmp_path) -> tuple[HeldPublish, Agent]:
    """An agent (VM heartbeats a period of 1000 s apart) running one attempt on a VM of two slots, and its transport."""
    transport = HeldPublish(VM)
    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(tmp_path)), transport, local=True,
                  slots=Slots(Capacity(gpus=8, max_jobs=2)))
    agent.slots.take(("running", 1), 4)
    agent.slots.running(("running", 1))
    return transport, agent


def retired_said(transport: HeldPublish, agent: Agent, beating: threading.Thread, loop: threading.Thread) -> None:
    """The held VM heartbeat let go: RETIRED is said within 5 s (a period is 1000 s), and the loop ends."""
    try:
        transport.go.set()
        beating.join(10)
        wait_for(lambda: "RETIRED" in transport.vm_states(), 5, what="RETIRED said")
    finally:
        transport.go.set()
        agent.request_shutdown("test over")
        loop.join(10)


def test_the_loop_retiring_while_an_attempt_sends_a_vm_heartbeat_says_retired_at_once(tmp_path):
    transport, agent = busy_agent(tmp_path)
    transport.hold = True
    beating = threading.Thread(target=agent.vm_beats.beat, kwargs={"force": True}, name="zen-attempt-running-1")
    beating.start()  # the attempt's VM heartbeat (BUSY), its publish under way
    assert transport.sending.wait(10)
    loop = threading.Thread(target=agent._retire, name="loop")  # a pull limit reached: RETIRED from now on
    loop.start()
    wait_for(lambda: agent.vm_beats.retired, 10, what="the loop retiring")
    retired_said(transport, agent, beating, loop)  # without the fix: nothing more within the period
    assert transport.vm_states()[0] == "BUSY"


def test_an_attempts_vm_heartbeat_begun_as_the_loop_asks_for_one_says_retired(tmp_path):
    """The attempt's VM heartbeat begins just as the loop asks for one: it answers the ask, so it must say RETIRED (it
    said BUSY when the loop asked before it retired, and the loop's RETIRED waited a period)."""
    transport, agent = busy_agent(tmp_path)
    beats = agent.vm_beats
    beats._lock.acquire()  # the attempt's VM heartbeat waits for the lock until the loop asks
    beating = threading.Thread(target=beats.beat, kwargs={"force": True}, name="zen-attempt-running-1")
    ask = beats.due

    def asked() -> None:  # the attempt's heartbeat goes as the loop asks, and begins its publish
        ask()
        beats._lock.release()
        assert transport.sending.wait(10)

    beats.due = asked
    transport.hold = True
    beating.start()
    loop = threading.Thread(target=agent._retire, name="loop")
    loop.start()
    assert transport.sending.wait(10)
    retired_said(transport, agent, beating, loop)  # without retiring before the ask: the attempt's says BUSY
