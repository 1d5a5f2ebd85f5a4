"""At the VM's shutdown (a spot preemption's notice) the agent stops the job within the shutdown's deadline so that,
whatever docker does, the PREEMPTED report still goes (docs/reference/agent.md). ``RunningJob.stop`` kept that bound,
but ``AttemptRunner.run`` then called ``job.outcome()``, which removed the container again with no budget: with a
hung docker daemon 4 ``docker ps`` and 3 ``docker rm`` of ``DOCKER_TIMEOUT_S`` (10 s) each, ~70 s, far past
systemd's TimeoutStopSec. The agent was killed before its PREEMPTED report and the checkpoint's last save: the
attempt was taken for lost, one spent, no ZEN_PREEMPTED. (DOCKER_TIMEOUT_S is shortened here.)"""

from __future__ import annotations

import time

from tests.agent.helpers import wait_for
from zen.agent.runner import container_name


def test_a_preemption_with_a_hung_docker_still_reports_by_the_shutdown_deadline(tmp_path, monkeypatch):
    """The spot VM's notice through the agent, docker hung: the PREEMPTED report goes by the
    shutdown's deadline (stop grace + SHUTDOWN_S from the request: systemd kills the agent 5 s after it)."""
    import dataclasses

    from tests.agent.fakedocker import FakeDocker
    from tests.agent.fakes import FakeTransport, confirm_claims
    from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
    from zen.agent.agent import Agent
    from zen.agent.shutdown import SHUTDOWN_S
    from zen.core.models import AgentStatus, Heartbeat

    monkeypatch.setattr("zen.agent.removal.REMOVE_PAUSE_S", 0.0)
    monkeypatch.setattr("zen.agent.removal.DOCKER_TIMEOUT_S", 3.0)  # 10 s in production: ~70 s in all
    fake = FakeDocker(tmp_path / "docker")
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message("spot", image="img:1", command=["x"]))
    settings = dataclasses.replace(SETTINGS, docker=fake.path, work_dir=str(tmp_path / "work"), stop_grace_s=0.3)
    agent = Agent(IDENTITY, settings, transport, local=False)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    confirm = confirm_claims(VM)
    at: dict[str, float] = {}

    def scheduler(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.RUNNING and "notice" not in at:
            wait_for(lambda: fake.names() == [container_name("spot", 1)], 10, what="the container running")
            fake.hang("kill")
            fake.hang("ps")
            fake.hang("rm")
            at["notice"] = time.monotonic()
            agent.request_shutdown("preempted")  # the metadata server's instance/preempted
        if isinstance(message, Heartbeat) and message.status is AgentStatus.PREEMPTED:
            at.setdefault("report", time.monotonic())
        return confirm(message)

    transport.answer = scheduler
    agent.run()
    assert "report" in at
    took = at["report"] - at["notice"]
    assert took <= settings.stop_grace_s + SHUTDOWN_S, f"PREEMPTED sent {took:.1f} s after the notice"
