"""A stopped job's container that docker could not remove (kill and ``rm -f`` fail: a hung or failing daemon)
may still run the job. A real agent (``zen.agent``, a fake transport, ``tests.agent.fakedocker``): its final
report waits while docker lists the container, the attempt reported RUNNING meanwhile, so that Zen reruns
nothing beside it (zen.agent.leftover); the report went at once, and a queue's preemption reran the job
elsewhere while the container ran on here until the VM was deleted. The VM retires at once, and no final report
goes while the container may run: Zen reruns the job only after the VM is gone and silent."""

from __future__ import annotations

import dataclasses

import pytest

from tests.agent.fakedocker import FakeDocker
from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.helpers import wait_for
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from zen.agent import leftover
from zen.agent.agent import Agent
from zen.agent.runner import container_name
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat
from zen.core.vm_heartbeat import VmHeartbeat

CONTAINER = container_name("first", 1)


@pytest.mark.parametrize("docker_heals", [True, False])
def test_the_final_report_waits_while_the_stopped_jobs_container_may_run(tmp_path, monkeypatch, docker_heals):
    monkeypatch.setattr("zen.agent.removal.REMOVE_PAUSE_S", 0.0)
    monkeypatch.setattr(leftover, "RETRY_S", 2.0)  # each try's budget too: a loaded machine's docker calls are slow
    monkeypatch.setattr(leftover, "ROUND_S", 0.1)
    monkeypatch.setattr(leftover, "WAIT_S", 60.0)  # longer than the test: a stopped job retires the VM at once
    docker = FakeDocker(tmp_path / "docker")
    docker.fail("kill")
    docker.fail("rm")
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message("first", image="img:1", command=["x"]))
    settings = dataclasses.replace(SETTINGS, docker=docker.path, work_dir=str(tmp_path / "work"), stop_grace_s=0.3)
    agent = Agent(IDENTITY, settings, transport, local=False)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    confirm = confirm_claims(VM)
    seen: dict[str, list] = {"running while listed": [], "final": []}

    def scheduler(message):
        if isinstance(message, VmHeartbeat) and message.state.value == "RETIRED":
            seen["retired"] = []
        if isinstance(message, Heartbeat) and message.status is AgentStatus.RUNNING:
            if "stop" not in seen:
                seen["stop"] = []
                wait_for(lambda: docker.names() == [CONTAINER], 10, what="the container running")
                return [ControlMessage(vm=VM, job_id="first", attempt=1, action=ControlAction.STOP,
                                       reason="preempted: queue q took it back")]
            if docker.names() == [CONTAINER]:
                seen["running while listed"].append(message.message)
                if docker_heals:  # docker answers again once the agent said the job may still run (a timer of
                    (tmp_path / "docker" / "fail-rm").unlink(missing_ok=True)  # 1 s raced a loaded machine's tries)
                elif "retired" in seen:
                    agent.request_shutdown("retired")  # as the VM's deletion ends it
        if isinstance(message, Heartbeat) and message.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING):
            seen["final"].append((message.status.value, docker.names(), message.message))
            agent.request_shutdown("test over")  # (a retired VM pulls nothing more)
        return confirm(message)

    transport.answer = scheduler
    assert agent.run() == 0
    assert seen["running while listed"]
    assert set(seen["running while listed"]) == {leftover.RUNNING_NOTE}
    if docker_heals:
        [(status, listed, note)] = seen["final"]
        assert status == "STOPPED" and listed == [] and "the job's container was removed" in note
    else:
        # No final report: it went after WAIT_S with the container running, and a queue's preemption reran the job
        # elsewhere at once, beside it. The attempt says RUNNING until the VM shuts down, and Zen, hearing nothing
        # more, reruns it once the silence outlasts preempted_stop_s (zen.core.silence.decide_silence): the VM gone.
        assert seen["final"] == [] and docker.names() == [CONTAINER]
    # The VM retired at once, docker healed or not: its slot is no other job's, it takes no other job, and Zen
    # deletes it, the container with it (tests.agent.test_stopped_container_left_retires).
    assert "RETIRED" in transport.vm_states()
