"""A VM running several jobs at once (``max_jobs_per_vm`` > 1) whose agent powers it off for one attempt's container
that docker cannot remove (``zen.agent.leftover.fence_vm``) ends the other attempts on it too. They were ended
without a word: Zen learned it only from the lost-job sweep, ``heartbeat_timeout_s`` later, each spending an
attempt, while the VM was gone at once. The agent now shuts down first, as at a VM shutdown, and each other attempt
is reported PREEMPTED (requeued at once, unspent) before the power-off. A real agent process in container mode
against the stand-in docker (``fakedocker``), with the real scheduler (see conftest.py); the power-off is the
agent killed outright once it asked for it."""

from __future__ import annotations

import json
import time

import pytest

from tests.agent.conftest import shared_vms_config
from tests.agent.fakedocker import FakeDocker
from tests.agent.helpers import wait_for
from zen.agent import leftover

IMAGE = "us-docker.pkg.dev/p/r/train:1"
SHARED = "8xa100-40gb"
LEFT, OTHER = "left-1", "other-1"


@pytest.fixture
def config(project):
    return shared_vms_config(project, SHARED)


def submit_four_gpus(scheduler, job_id: str) -> None:
    scheduler._publish(scheduler.config.topics.job_submitted, {
        "job_id": job_id, "user_id": "alice", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4,
        "command": ["python", "train.py"], "image": IMAGE})


def reports_of(job_id: str):
    """Pub/Sub refuses the reports of ``job_id`` (its VM's heartbeats and other jobs' go through)."""
    def refuse(topic: str, message) -> bool:
        return message.attributes.get("kind") == "job" and json.loads(message.data).get("job_id") == job_id
    return refuse


def test_a_power_off_for_one_attempts_container_reports_the_vms_other_attempts_first(
        scheduler, agents, pubsub_server, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    fence = tmp_path / "fence"
    for job_id in (LEFT, OTHER):
        submit_four_gpus(scheduler, job_id)
    agent = agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path, ZEN_CLUSTER=SHARED,
                         ZEN_AGENT_FENCE_FILE=str(fence))
    budget = {job_id: scheduler.wait_status(job_id, "RUNNING", timeout_s=60).max_attempts for job_id in (LEFT, OTHER)}
    wait_for(lambda: len(docker.names()) == 2, 10, what="both jobs' containers")

    # A user stops LEFT; docker can neither kill nor remove its container (a hung or failing daemon): it may run on,
    # and its attempt goes on saying so. Then none of its reports reach Zen: once its lease runs out the agent asks
    # for the VM's power-off, lest the container run beside the job's rerun.
    docker.fail("kill")
    docker.fail("rm")
    scheduler.stop(LEFT)
    wait_for(lambda: scheduler.job(LEFT).message == leftover.RUNNING_NOTE, 30, 0.1,
             what=f"{LEFT} saying its container is left")
    pubsub_server.faults.refuse = reports_of(LEFT)
    try:
        wait_for(lambda: fence.exists() and fence.read_text(), 30, 0.05, what="the VM's power-off asked for")
        agent.kill()  # powered off: nothing on the VM says another word
        off = time.monotonic()
        assert "left-1 attempt 1" in fence.read_text()

        # No sweep: the other attempt must be over at once, its attempt unspent, not only once the sweep finds the VM
        # silent (heartbeat_timeout_s, 10 s here) and spends one.
        job = scheduler.wait_status(OTHER, "QUEUED", timeout_s=8)
        print(f"\n{OTHER} requeued {time.monotonic() - off:.1f} s after the power-off")
    finally:
        pubsub_server.faults.refuse = None
    assert job.attempt == 2 and job.max_attempts == budget[OTHER] + 1, (job.attempt, job.max_attempts)
    [(_, _, lost)] = [entry for entry in scheduler.history(OTHER) if entry[1] == "LOST"]
    assert "no attempt spent" in lost, lost
    assert agent.said("heartbeat sent", job_id=OTHER, status="PREEMPTED"), f"{OTHER} requeued, not by its report"
