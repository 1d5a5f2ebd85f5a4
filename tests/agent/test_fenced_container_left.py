"""A job the fence stopped (no report of its attempt reached Zen within the lease: ``zen.agent.fence``) whose
container docker could not remove may still run. Zen takes that attempt for lost and publishes the job's next
attempt, which a VM running several jobs at once (``max_jobs_per_vm`` > 1) may pull in another slot: the VM kept
pulling and claiming while the final report waited for the container (``leftover.WAIT_S``, 5 minutes), so it
claimed the next attempt of the same job and ran it beside the old one's container. The VM now retires at once,
as the container is known left, and asks for its power-off (``leftover.fence_vm``: Zen runs the job elsewhere too).
A real agent (``zen.agent``, a fake transport, ``tests.agent.fakedocker``)."""

from __future__ import annotations

import dataclasses
import threading

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
from zen.core.models import AgentStatus, Heartbeat

OLD = container_name("twice", 1)


class CutOff(FakeTransport):
    """The reports of ``twice`` attempt 1 fail while ``cut`` (its VM heartbeats and other attempts' go through).
    The first that says its container is left (``leftover.RUNNING_NOTE``) heals the cut: Zen, having taken the
    attempt for lost, publishes attempt 2 (``rerun``)."""

    def __init__(self, rerun):
        super().__init__(VM, virtual_time=False)
        self.cut, self.rerun = False, rerun

    def publish(self, message, *, budget_s, **abandon):
        if isinstance(message, Heartbeat) and (message.job_id, message.attempt) == ("twice", 1) and self.cut:
            if message.message != leftover.RUNNING_NOTE:
                raise TransportError("network partition")
            self.cut = False
            self.rerun()
        super().publish(message, budget_s=budget_s, **abandon)


@pytest.mark.parametrize("killed", [False, True])
def test_a_fenced_attempt_whose_container_is_left_takes_no_rerun_of_its_job_beside_it(tmp_path, monkeypatch, killed):
    # killed: docker killed the container (it runs no more) but cannot remove it: the VM retires, and stays on (its
    # other jobs run on).
    monkeypatch.setattr("zen.agent.removal.REMOVE_PAUSE_S", 0.0)
    monkeypatch.setattr(leftover, "RETRY_S", 2.0)
    monkeypatch.setattr(leftover, "ROUND_S", 0.1)
    monkeypatch.setattr(leftover, "WAIT_S", 60.0)  # longer than the test: the final report still waits
    docker = FakeDocker(tmp_path / "docker")
    reran: list[threading.Timer] = []

    def rerun():
        transport.add_start(start_message("twice", attempt=2, image="img:1", command=["x"], gpus=4))
        reran.append(threading.Timer(3.0, lambda: agent.request_shutdown("test over")))  # the loop polls every 0.05 s
        reran[0].start()

    transport = CutOff(rerun)
    transport.add_start(start_message("twice", image="img:1", command=["x"], gpus=4))
    # Zen's deadline 4 s: the fence falls 4 - 0.3 - 1 = 2.7 s after the last report that went through.
    settings = dataclasses.replace(SETTINGS, docker=docker.path, work_dir=str(tmp_path / "work"), stop_grace_s=0.3,
                                   heartbeat_timeout_s=4.0, fence_file=str(tmp_path / "fence"))
    agent = Agent(IDENTITY, settings, transport, local=False, slots=Slots(Capacity(gpus=8, max_jobs=2)))
    confirm = confirm_claims(VM)
    beside: list[list[str]] = []

    def scheduler(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.RUNNING and not transport.cut \
                and not reran and (message.job_id, message.attempt) == ("twice", 1):
            wait_for(lambda: OLD in docker.names(), 10, what="the container running")
            if killed:
                docker.kill_keeps()
            else:
                docker.fail("kill")  # a hung or failing daemon: the job cannot be killed nor its container removed
            docker.fail("rm")
            transport.cut = True
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED and message.attempt == 2:
            beside.append(docker.names())
            agent.request_shutdown("test over")
        return confirm(message)

    transport.answer = scheduler
    assert agent.run() == 0
    for timer in reran:
        timer.cancel()
    assert reran, "the fence did not stop the job, or its container was removed"
    assert beside == [], f"attempt 2 claimed on the VM where attempt 1's container is left: {beside}"
    assert "RETIRED" in transport.vm_states()
    if killed:
        assert not (tmp_path / "fence").exists(), "the VM was powered off, though its container runs no more"
    else:
        assert "twice attempt 1" in (tmp_path / "fence").read_text()  # the agent's own fence asked for the power-off
    [final] = [m for m in transport.published if isinstance(m, Heartbeat) and m.attempt == 1
               and m.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)]
    assert final.status is AgentStatus.PREEMPTED and "no heartbeat reached Zen" in final.message
