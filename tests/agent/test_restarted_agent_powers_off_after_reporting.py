"""An agent systemd restarts on a VM that ran several jobs at once finds a container its dead predecessor left that
docker can neither remove nor say has stopped: it may still run its job, so the agent powers the VM off
(``zen.agent.leftover.fence_vm``). The other jobs' containers are gone, and their attempts are reported PREEMPTED
(``zen.agent.restart``): requeued at once, unspent. The power-off was asked for first thing, before those reports
went: the VM went with them unsent, and the attempts waited for the lost-job sweep (``heartbeat_timeout_s``), each
spending an attempt. The reports now go first, and the power-off follows (within ``POWER_OFF_S`` of the removal's
failure, whatever Pub/Sub does). A real agent process in container mode against the stand-in docker
(``fakedocker``), with the real scheduler (see conftest.py); the power-off is the agent killed outright once it asked
for it."""

from __future__ import annotations

import pytest

from tests.agent.conftest import shared_vms_config
from tests.agent.fakedocker import FakeDocker
from tests.agent.helpers import wait_for
from tests.agent.test_power_off_reports_other_attempts import reports_of
from tests.agent.test_restarted_agent_ends_its_attempts import containers, running_side_by_side
from zen.agent import leftover
from zen.agent.journal import REPLAY_BUDGET_S
from zen.agent.runner import container_name

SHARED = "8xa100-40gb"


@pytest.fixture
def config(project):
    return shared_vms_config(project, SHARED)


def test_a_restarted_agent_reports_the_gone_attempts_before_it_powers_the_vm_off(scheduler, agents, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    fence = tmp_path / "fence"
    jobs = ["kept-1", "freed-1"]
    doomed, budgets = running_side_by_side(scheduler, agents, docker, jobs)
    docker.stuck(container_name("kept-1", 1))  # it may run on: the VM must go

    doomed.kill()
    restarted = agents.start("vm-a", **containers(docker, SHARED), ZEN_AGENT_FENCE_FILE=str(fence))
    wait_for(lambda: fence.exists() and fence.read_text(), 30, 0.02, what="the VM's power-off asked for")
    restarted.kill()  # powered off: nothing on the VM says another word
    assert container_name("kept-1", 1) in fence.read_text()

    # No sweep: only the restarted agent's report, sent before the power-off, ends freed-1's attempt.
    assert restarted.said("heartbeat sent", job_id="freed-1", status="PREEMPTED"), "freed-1 not reported before the power-off"
    freed = wait_for(lambda: (j := scheduler.job("freed-1")).attempt >= 2 and j, 10, 0.2, what="freed-1 requeued")
    assert freed.max_attempts == budgets["freed-1"] + 1, (freed.max_attempts, scheduler.history("freed-1"))
    assert not restarted.said("an attempt the previous agent ran ended with it; reported PREEMPTED", job_id="kept-1")
    kept = scheduler.job("kept-1")
    assert (kept.attempt, kept.status.value) == (1, "RUNNING"), (kept.attempt, kept.status)


def test_a_restarted_agent_whose_reports_wait_for_pubsub_powers_the_vm_off_all_the_same(
        scheduler, agents, pubsub_server, tmp_path):
    """Pub/Sub does not take freed-1's report (UNAVAILABLE: the client retries it for its whole budget): the power-off
    does not wait for it (``POWER_OFF_S``), where the container left would run on beside its job's rerun."""
    docker = FakeDocker(tmp_path / "docker")
    fence = tmp_path / "fence"
    doomed, _ = running_side_by_side(scheduler, agents, docker, ["kept-1", "freed-1"])
    docker.stuck(container_name("kept-1", 1))

    doomed.kill()
    pubsub_server.faults.code, pubsub_server.faults.refuse = "UNAVAILABLE", reports_of("freed-1")
    try:
        restarted = agents.start("vm-a", **containers(docker, SHARED), ZEN_AGENT_FENCE_FILE=str(fence))
        wait_for(lambda: fence.exists() and fence.read_text(), REPLAY_BUDGET_S / 2, 0.05,
                 what="the VM's power-off asked for, before the report's budget is out")
        restarted.kill()
    finally:
        pubsub_server.faults.code, pubsub_server.faults.refuse = "PERMISSION_DENIED", None
    assert restarted.said("an attempt the previous agent ran ended with it; reported PREEMPTED", job_id="freed-1")
    assert not restarted.said("heartbeat sent", job_id="freed-1", status="PREEMPTED")
    assert fence.read_text().count("\n") == 1, fence.read_text()


def test_a_power_off_decided_at_the_start_is_asked_for_once(tmp_path):
    """By its timer when the agent has not asked for it by then, and not again when the agent does."""
    fence = tmp_path / "fence"
    off = leftover.PowerOffAtStart(str(fence), "a container left may run", within_s=0.01)
    # The file exists once opened, before the reason is written: wait for the line, not the file.
    wait_for(lambda: fence.exists() and fence.read_text().endswith("\n"), 5, 0.01, what="the timer's power-off")
    off.now()
    assert fence.read_text() == "a container left may run\n"
