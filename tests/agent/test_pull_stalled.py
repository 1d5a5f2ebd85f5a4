"""A job's image pull that stops making progress (a registry or a network that stops sending without closing: docker
waits for hours) held the attempt RUNNING with nothing bounding it: the VM billed, the time counted toward the job's
``max_runtime_s``, and the job then FAILED "zen: killed after exceeding max_runtime_s=..." with its attempt spent,
though its command never ran. Now the agent pulls an absent image itself first (``zen.agent.imagepull``), heartbeating
RUNNING with what it does, and a pull silent for ``ZEN_AGENT_PULL_STALL_S`` is cancelled: the attempt is requeued
unspent and the VM retires, as for a pull the network cut short. A pull that progresses slowly but steadily is not
cut, and a STOP during the pull stops the job then."""

from __future__ import annotations

from tests.agent.fakedocker import FakeDocker
from tests.agent.test_container_ends_named import IMAGE
from tests.waiting import wait_for


def test_a_stalled_pull_is_cancelled_and_the_attempt_requeued_unspent(scheduler, agents, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.pulls(lines=2, every_s=0.1, stalls=True)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path, ZEN_AGENT_PULL_STALL_S="1")
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE, max_attempts=1, max_runtime_s=30)

    job = wait_for(lambda: (job := scheduler.job("train-1")) and (job.attempt == 2 or job.status.value == "FAILED")
                   and job, 90, what="train-1 ended or requeued")
    assert (job.status.value, job.attempt, job.exit_code) == ("QUEUED", 2, None), (job.status.value, job.message)
    assert f"docker's pull of the job's image {IMAGE} made no progress for 1 s" in (job.message or ""), job.message
    [lost] = [reason for attempt, status, reason in scheduler.history("train-1") if status == "LOST"]
    assert lost.endswith("(no attempt spent)"), lost
    assert not [call for call in docker.calls() if call[0] == "run"]  # its command never ran
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 60, what="vm-a retired")


def test_a_slow_but_steady_pull_is_not_cut(scheduler, agents, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.pulls(lines=12, every_s=0.1)  # about 1.2 s of pulling, a line each 0.1 s: never 2 s silent
    docker.ends(0)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path, ZEN_AGENT_PULL_STALL_S="2")
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE, max_attempts=1)

    job = wait_for(lambda: (job := scheduler.job("train-1")) and job.status.value in ("SUCCEEDED", "FAILED", "QUEUED")
                   and job.attempt == 1 and job.status.value != "QUEUED" and job, 60, what="train-1 ended")
    assert (job.status.value, job.exit_code) == ("SUCCEEDED", 0), job.message
    assert [call[0] for call in docker.calls() if call[0] in ("pull", "run")] == ["pull", "run"]


def test_a_stop_during_the_pull_stops_the_job_then(scheduler, agents, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.pulls(lines=1, every_s=0.1, stalls=True)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path, ZEN_AGENT_PULL_STALL_S="600")
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE)
    wait_for(lambda: (job := scheduler.job("train-1")) and job.status.value == "RUNNING" and "pulling the job's image"
             in (job.message or ""), 60, what="train-1 RUNNING, saying it pulls its image")

    scheduler.stop("train-1", "not needed")

    job = wait_for(lambda: (job := scheduler.job("train-1")) and job.status.value == "CANCELLED" and job, 60,
                   what="train-1 cancelled")
    assert "zen: stopped while pulling the job's image (not needed)" in (job.message or ""), job.message
    assert not [call for call in docker.calls() if call[0] == "run"]
