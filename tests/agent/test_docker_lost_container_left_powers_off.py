"""A job whose docker daemon crashed under it (``docker run`` exits 125, its CLI logging ``error waiting for
container: ...``: ``zen.agent.container.WAIT_LOST``) has an unknown end: containerd's shim may keep its container,
and the job, running. Its report waits for the container's removal (``leftover.WAIT_S``); a daemon that stays down
removes nothing, and past ``WAIT_S`` the attempt is reported PREEMPTED, which Zen requeues and may start on another
VM at once. This VM stayed on, retired, until Zen's next scaling pass deleted it: the job ran twice at once for
minutes. It is now powered off (``leftover.fence_vm``) right after that report, not before it (Zen requeues the
attempt at once, free, instead of taking it for lost later). A job that ended on its own (its exit code known: its
container runs no more) leaves the VM on. A real agent (``zen.agent.agent.Agent``, a fake transport,
``tests.agent.fakedocker``)."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from tests.agent.fakedocker import FakeDocker
from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from zen.agent import leftover
from zen.agent.agent import Agent
from zen.agent.runner import container_name
from zen.agent.slots import Capacity, Slots
from zen.core.models import AgentStatus, Heartbeat
from zen.core.vm_heartbeat import VmHeartbeat

LOST = 'time="2026-12-06T17:50:01Z" level=error msg="error waiting for container: unexpected EOF"\n'


@pytest.mark.parametrize("lost", [True, False])
def test_a_lost_container_left_past_its_wait_powers_the_vm_off_after_its_report(tmp_path, monkeypatch, lost):
    monkeypatch.setattr("zen.agent.removal.REMOVE_PAUSE_S", 0.0)
    monkeypatch.setattr(leftover, "WAIT_S", 1.0)  # 5 minutes on a VM
    monkeypatch.setattr(leftover, "RETRY_S", 0.3)
    monkeypatch.setattr(leftover, "ROUND_S", 0.1)
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(125 if lost else 0, "epoch 3/10: loss 0.41\n" + (LOST if lost else ""), started=not lost)
    for command in ("rm", "ps", "inspect", "kill"):  # the daemon stays down: docker can say and do nothing
        docker.fail(command)
    fence = tmp_path / "fence"
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message("train", image="img:1", command=["python", "train.py"]))
    settings = dataclasses.replace(SETTINGS, docker=docker.path, work_dir=str(tmp_path / "work"),
                                   fence_file=str(fence))
    agent = Agent(IDENTITY, settings, transport, local=False)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    confirm = confirm_claims(VM)
    fenced_at_report: list[bool] = []

    def scheduler(message):
        if isinstance(message, Heartbeat) and message.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING):
            fenced_at_report.append(fence.exists())
        if isinstance(message, VmHeartbeat) and message.state.value == "RETIRED":
            agent.request_shutdown("retired")
        return confirm(message)

    transport.answer = scheduler
    assert agent.run() == 0

    assert docker.names() == [container_name("train", 1)]  # never removed: the daemon stayed down
    [final] = [m for m in transport.published if isinstance(m, Heartbeat)
               and m.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)]
    assert "could not be removed within 1 s: it may still run" in (final.message or ""), final.message
    assert fenced_at_report == [False], "the VM was powered off before its attempt's final report"
    if lost:
        assert final.status is AgentStatus.PREEMPTED and "docker lost a job's container" in (final.message or "")
        assert fence.exists(), "the VM stayed on after the PREEMPTED report: the rerun elsewhere runs beside the job"
        assert "train attempt 1" in fence.read_text()
    else:
        assert final.status is AgentStatus.SUCCEEDED
        assert not fence.exists(), "the VM was powered off, though its job ended on its own"


def test_a_lost_container_on_a_vm_of_several_jobs_reports_the_others_before_the_power_off(tmp_path, monkeypatch):
    monkeypatch.setattr("zen.agent.removal.REMOVE_PAUSE_S", 0.0)
    monkeypatch.setattr(leftover, "WAIT_S", 1.0)
    monkeypatch.setattr(leftover, "RETRY_S", 0.3)
    monkeypatch.setattr(leftover, "ROUND_S", 0.1)
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(125, LOST, only=container_name("train", 1), started=False)  # its daemon crashes under it, and stays down
    fence = tmp_path / "fence"
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message("other", image="img:1", command=["python", "serve.py"], gpus=4))
    settings = dataclasses.replace(SETTINGS, docker=docker.path, work_dir=str(tmp_path / "work"),
                                   fence_file=str(fence), stop_grace_s=0.3)
    agent = Agent(IDENTITY, settings, transport, local=False, slots=Slots(Capacity(gpus=8, max_jobs=2)))
    confirm = confirm_claims(VM)
    fenced_at_report: dict[str, bool] = {}
    started: list[str] = []

    def scheduler(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.RUNNING and message.job_id == "other" \
                and not started:
            started.append("train")  # then the next job, whose daemon crashes under it, and stays down
            for command in ("rm", "ps", "inspect"):
                docker.fail(command)
            transport.add_start(start_message("train", image="img:1", command=["python", "train.py"], gpus=4))
        if isinstance(message, Heartbeat) and message.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING):
            fenced_at_report[message.job_id] = fence.exists()
        return confirm(message)

    transport.answer = scheduler
    over = threading.Timer(15.0, lambda: agent.request_shutdown("test over"))  # without a power-off, nothing ends it
    over.start()
    try:
        assert agent.run() == 0
    finally:
        over.cancel()

    finals = {m.job_id: m for m in transport.published if isinstance(m, Heartbeat)
              and m.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)}
    assert {job: m.status for job, m in finals.items()} == {"train": AgentStatus.PREEMPTED,
                                                             "other": AgentStatus.PREEMPTED}
    assert "could not be removed within 1 s" in (finals["train"].message or ""), finals["train"].message
    assert fenced_at_report == {"train": False, "other": False}, "the VM was powered off before a final report"
    assert "train attempt 1" in (fence.read_text() if fence.exists() else ""), "the VM stayed on after the reports"
