"""A stopped job's container that docker could not remove (kill and ``rm -f`` fail: a hung or failing daemon) may
still run the job on its GPUs. Its VM retires at once (``zen.agent.leftover``): it kept pulling and claiming for
``leftover.WAIT_S`` (5 minutes) with the container there. A queue's preemption whose attempt then went silent
(its reports failing) was rerun by Zen after ``preempted_stop_s``, and a VM running several jobs at once claimed
that rerun in its other slot, beside the container: the job ran twice at once. After a user's stop, the VM
took other users' jobs, then was deleted under them. A real agent (``zen.agent``, a fake transport,
``tests.agent.fakedocker``)."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from tests.agent.fakedocker import FakeDocker
from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.helpers import wait_for
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from zen.agent import leftover
from zen.agent.agent import Agent
from zen.agent.runner import container_name
from zen.agent.slots import Capacity, Slots
from zen.agent.transport import TransportError
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat

OLD = container_name("first", 1)


class CutOff(FakeTransport):
    """Once ``cut``, the reports of ``first`` attempt 1 fail (a network partition for them): Zen hears its VM's
    heartbeats and other attempts' reports, not this attempt's."""

    def __init__(self):
        super().__init__(VM, virtual_time=False)
        self.cut = False

    def publish(self, message, *, budget_s, **abandon):
        if self.cut and isinstance(message, Heartbeat) and (message.job_id, message.attempt) == ("first", 1):
            raise TransportError("network partition")
        super().publish(message, budget_s=budget_s, **abandon)


def two_slots(tmp_path, monkeypatch, **settings) -> tuple[Agent, CutOff, FakeDocker]:
    """A real agent of two slots, given ``first`` attempt 1 to run; removals tried again every 2 s, and a final
    report waiting on its container longer than the test."""
    monkeypatch.setattr("zen.agent.removal.REMOVE_PAUSE_S", 0.0)
    monkeypatch.setattr(leftover, "RETRY_S", 2.0)
    monkeypatch.setattr(leftover, "ROUND_S", 0.1)
    monkeypatch.setattr(leftover, "WAIT_S", 60.0)
    docker = FakeDocker(tmp_path / "docker")
    transport = CutOff()
    transport.add_start(start_message("first", image="img:1", command=["x"], gpus=4))
    agent = Agent(IDENTITY, dataclasses.replace(SETTINGS, docker=docker.path, work_dir=str(tmp_path / "work"),
                                                stop_grace_s=0.3, **settings),
                  transport, local=False, slots=Slots(Capacity(gpus=8, max_jobs=2)))
    return agent, transport, docker


def first_stop(seen: dict, docker: FakeDocker, reason: str) -> list[ControlMessage] | None:
    """Zen's answer to the attempt's first RUNNING: a STOP, docker failing from then on (a hung or failing daemon:
    the job cannot be killed nor its container removed); None after."""
    if "stop" in seen:
        return None
    seen["stop"] = []
    wait_for(lambda: OLD in docker.names(), 10, what="the container running")
    docker.fail("kill")
    docker.fail("rm")
    return [ControlMessage(vm=VM, job_id="first", attempt=1, action=ControlAction.STOP, reason=reason)]


@pytest.mark.parametrize("reason, next_job", [
    ("preempted: queue q took it back", ("first", 2)),  # the same job rerun, once its attempt is silent
    ("user asked", ("other", 1)),  # another user's job
])
def test_a_stopped_attempt_whose_container_is_left_takes_no_job_beside_it(tmp_path, monkeypatch, reason, next_job):
    agent, transport, docker = two_slots(tmp_path, monkeypatch)
    confirm = confirm_claims(VM)
    seen: dict[str, list] = {"left": [], "beside": [], "timers": []}

    def publish_next():  # Zen: the rerun once attempt 1 was silent past preempted_stop_s, or another job
        transport.cut = next_job[0] == "first"
        transport.add_start(start_message(next_job[0], attempt=next_job[1], image="img:1", command=["x"], gpus=4))
        seen["timers"].append(threading.Timer(3.0, lambda: agent.request_shutdown("test over")))
        seen["timers"][-1].start()

    def scheduler(message):
        if isinstance(message, Heartbeat) and (message.job_id, message.attempt) == ("first", 1) \
                and message.status is AgentStatus.RUNNING:
            if (stop := first_stop(seen, docker, reason)) is not None:
                return stop
            if message.message == leftover.RUNNING_NOTE and not seen["left"]:
                seen["left"].append(message.message)
                publish_next()
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED \
                and (message.job_id, message.attempt) == next_job:
            seen["beside"].append(docker.names())
            agent.request_shutdown("test over")
        return confirm(message)

    transport.answer = scheduler
    assert agent.run() == 0
    for timer in seen["timers"]:
        timer.cancel()
    assert seen["left"], "the job was killed, or its container removed"
    assert seen["beside"] == [], f"{next_job} claimed on the VM where {OLD} is left: {seen['beside']}"
    assert "RETIRED" in transport.vm_states()
    assert not [m for m in transport.published if isinstance(m, Heartbeat) and m.attempt == 1 and m.job_id == "first"
                and m.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)], "a final report while it may run"


def test_a_stopped_attempt_whose_container_is_left_powers_the_vm_off_once_its_lease_runs_out(tmp_path, monkeypatch):
    """Its queue took the job back; docker cannot kill the container; then none of the attempt's reports reach Zen
    (its RUNNING, saying the container may run, would hold the rerun back). Zen reruns the job once the VM has been
    silent ``preempted_stop_s``, which the lease runs out before: the VM is powered off then
    (``leftover.fence_vm``), or the container would run the job beside its rerun elsewhere."""
    fence = tmp_path / "fence"
    # Zen's deadline 4 s: the lease runs out 4 - 0.3 - 1 = 2.7 s after the last report that went through.
    agent, transport, docker = two_slots(tmp_path, monkeypatch, heartbeat_timeout_s=4.0, fence_file=str(fence))
    confirm = confirm_claims(VM)
    seen: dict[str, list] = {}

    def scheduler(message):
        if isinstance(message, Heartbeat) and (message.job_id, message.attempt) == ("first", 1) \
                and message.status is AgentStatus.RUNNING:
            if (stop := first_stop(seen, docker, "preempted: queue q took it back")) is not None:
                return stop
            if message.message == leftover.RUNNING_NOTE:
                transport.cut = True  # from now on none of the attempt's reports reaches Zen
        return confirm(message)

    def until_fenced():  # (in life the power-off ends the agent)
        deadline = time.monotonic() + 12.0
        while not fence.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        agent.request_shutdown("test over")

    transport.answer = scheduler
    threading.Thread(target=until_fenced, daemon=True).start()
    assert agent.run() == 0
    assert fence.exists(), "the lease ran out with the container left and the VM still on"
    assert "first attempt 1" in fence.read_text()
