"""An agent that dies while it runs jobs (a crash, an OOM kill of the agent alone) and that systemd restarts on the
same VM: its jobs died with it (their containers are removed at its start). The new agent says so at once, for each
attempt the dead one ran, once docker lists its container gone (one it cannot remove is left to the sweep): PREEMPTED, as a VM going away does, so Zen
requeues the job unspent (the agent's death is not the job's doing) instead of waiting ``heartbeat_timeout_s`` for
the lost-job sweep, which spends one of the job's attempts; and a VM running several jobs at once takes new work at
once, where Zen refused its claims for want of room until the sweep. The real agent, restarted as systemd restarts
it, in container mode against the stand-in docker (``fakedocker``), with the real scheduler (see conftest.py)."""

from __future__ import annotations

import time

import pytest

from tests.agent.conftest import DEADLINES, shared_vms_config
from tests.agent.fakedocker import FakeDocker
from tests.agent.helpers import wait_for
from zen.agent.runner import container_name

IMAGE = "us-docker.pkg.dev/p/r/train:1"
SHARED = "8xa100-40gb"
ALONE = "1xl4"  # one job per VM


@pytest.fixture
def config(project):
    return shared_vms_config(project, SHARED)


def containers(docker: FakeDocker, cluster: str) -> dict[str, str]:
    return {"ZEN_AGENT_LOCAL": "0", "ZEN_AGENT_DOCKER": docker.path, "ZEN_CLUSTER": cluster}


def requeued(scheduler, job_id: str, sweep: bool):
    """The job once its attempt 1 is over (attempt 2 queued or later), the tick's sweep run meanwhile if ``sweep``."""
    if sweep:
        scheduler.sweep()
    job = scheduler.job(job_id)
    return job if job.attempt >= 2 else None


def test_a_restarted_agent_ends_its_predecessors_attempt_at_once_without_spending_it(scheduler, agents, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    doomed = agents.start("vm-a", **containers(docker, ALONE))
    scheduler.submit("crash-1", ["python", "train.py"], image=IMAGE, cluster=ALONE)
    before = scheduler.wait_status("crash-1", "RUNNING", timeout_s=60)
    wait_for(docker.names, 10, what="the job's container")

    doomed.kill()  # SIGKILL of the agent alone (the OOM killer): no goodbye, no PREEMPTED
    killed = time.monotonic()
    restarted = agents.start("vm-a", **containers(docker, ALONE))  # systemd restarts it on the same VM
    # The tick runs its sweep as it would in production; heartbeat_timeout_s is 10 s here.
    job = wait_for(lambda: requeued(scheduler, "crash-1", sweep=True), 30, 0.3, what="attempt 1 over")
    waited_s = time.monotonic() - killed
    rerun = wait_for(lambda: (j := scheduler.job("crash-1")).attempt == 2 and j.status.value == "RUNNING" and j,
                     30, 0.2, what="attempt 2 running")
    rerun_s = time.monotonic() - killed
    print(f"\nattempt 1 over {waited_s:.1f} s after the kill, attempt 2 running after {rerun_s:.1f} s; "
          f"max_attempts {before.max_attempts} -> {job.max_attempts}")

    [(_, _, lost)] = [entry for entry in scheduler.history("crash-1") if entry[1] == "LOST"]
    assert job.max_attempts == before.max_attempts + 1, f"attempt spent: {lost}"  # a preemption spends none
    assert "no attempt spent" in lost and waited_s < DEADLINES.heartbeat_timeout_s, (lost, waited_s)
    assert restarted.said("an attempt the previous agent ran ended with it; reported PREEMPTED", job_id="crash-1",
                          attempt=1)
    assert rerun.vm == "vm-a"  # the restarted agent took it again


def running_side_by_side(scheduler, agents, docker: FakeDocker, jobs: list[str]):
    """Two 4-GPU jobs running at once on vm-a's shared VM, in containers: its agent, and each job's attempts budget."""
    for job_id in jobs:
        scheduler._publish(scheduler.config.topics.job_submitted, {
            "job_id": job_id, "user_id": "alice", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4,
            "command": ["python", "train.py"], "image": IMAGE})
    doomed = agents.start("vm-a", **containers(docker, SHARED))
    budgets = {job_id: scheduler.wait_status(job_id, "RUNNING", timeout_s=60).max_attempts for job_id in jobs}
    wait_for(lambda: len(docker.names()) == 2, 10, what="the jobs' containers")
    return doomed, budgets


def test_a_shared_vm_whose_agent_restarted_takes_new_work_at_once(scheduler, agents, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    jobs = ["shared-1", "shared-2"]
    doomed, budgets = running_side_by_side(scheduler, agents, docker, jobs)

    doomed.kill()
    killed = time.monotonic()
    agents.start("vm-a", **containers(docker, SHARED))
    # No sweep: the restarted agent's VM must not wait for it to be given room.
    for job_id in jobs:
        wait_for(lambda: (j := scheduler.job(job_id)).attempt == 2 and j.status.value == "RUNNING" and j, 20, 0.2,
                 what=f"{job_id} running again on the restarted agent's VM")
    print(f"\nboth jobs running again {time.monotonic() - killed:.1f} s after the kill")

    for job_id in jobs:
        job = scheduler.job(job_id)
        assert (job.vm, job.max_attempts) == ("vm-a", budgets[job_id] + 1), (job.vm, job.max_attempts)
    wait_for(lambda: len(names := docker.names()) == 2 and all(name.endswith("-2") for name in names), 10,
             what="the attempts 2 in their containers, those of the attempts 1 gone")


def test_a_restarted_agent_that_cannot_remove_the_container_left_reports_nothing(scheduler, agents, tmp_path):
    """Docker cannot remove the dead agent's container: it may still run the job, so no report has Zen run it again
    beside it. The VM retires and Zen's sweep ends the attempt once its reports stop, as before."""
    docker = FakeDocker(tmp_path / "docker")
    doomed = agents.start("vm-a", **containers(docker, ALONE))
    scheduler.submit("stuck-1", ["python", "train.py"], image=IMAGE, cluster=ALONE)
    scheduler.wait_status("stuck-1", "RUNNING", timeout_s=60)
    wait_for(docker.names, 10, what="the job's container")  # its docker run may come just after its RUNNING
    docker.fail("kill")
    docker.fail("rm")

    doomed.kill()
    restarted = agents.start("vm-a", **containers(docker, ALONE))

    wait_for(lambda: len(restarted.said("agent started")) == 2, 30, what="the restarted agent running")  # (one log)
    assert not restarted.said("an attempt the previous agent ran ended with it; reported PREEMPTED")
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 30, what="vm-a retired")
    job = scheduler.job("stuck-1")
    assert (job.attempt, job.status.value) == (1, "RUNNING") and len(docker.names()) == 1


def test_a_shared_vm_whose_agent_cannot_remove_one_container_left_ends_the_other_attempts_at_once(
        scheduler, agents, tmp_path):
    """Of the two jobs the dead agent ran, docker cannot remove one's container: that one may still run, and is left
    to the sweep (the VM retires). The other's container is gone: its attempt is reported PREEMPTED at once, requeued
    unspent, where it waited for the sweep beside the first and spent an attempt."""
    docker = FakeDocker(tmp_path / "docker")
    jobs = ["kept-1", "freed-1"]
    doomed, budgets = running_side_by_side(scheduler, agents, docker, jobs)
    docker.stuck(container_name("kept-1", 1))

    doomed.kill()
    killed = time.monotonic()
    restarted = agents.start("vm-a", **containers(docker, SHARED))
    # No sweep: only the restarted agent's report ends the attempt.
    freed = wait_for(lambda: (j := scheduler.job("freed-1")).attempt >= 2 and j, 20, 0.2, what="freed-1 requeued")
    print(f"\nfreed-1 requeued {time.monotonic() - killed:.1f} s after the kill")

    assert freed.max_attempts == budgets["freed-1"] + 1, (freed.max_attempts, scheduler.history("freed-1"))
    assert restarted.said("an attempt the previous agent ran ended with it; reported PREEMPTED", job_id="freed-1",
                          attempt=1)
    assert not restarted.said("an attempt the previous agent ran ended with it; reported PREEMPTED", job_id="kept-1")
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 30, what="vm-a retired")
    kept = scheduler.job("kept-1")
    assert (kept.attempt, kept.status.value) == (1, "RUNNING"), (kept.attempt, kept.status)
    assert docker.names() == [container_name("kept-1", 1)]
