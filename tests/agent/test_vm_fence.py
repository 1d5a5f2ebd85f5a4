"""A job whose lease ran out (no report of its attempt reached Zen: ``zen.agent.fence``) is stopped before Zen takes
the attempt for lost and runs the job elsewhere. Where docker cannot kill its container (a hung or failing daemon),
the container would run the job on beside that rerun: the VM is powered off instead (``leftover.fence_vm``: the
file ``AgentSettings.fence_file``, which a root unit of the startup script watches). Here the job's supervisor
(``launch.py``) alone, with no agent to stop the job, against a stand-in docker (``tests.agent.fakedocker``)."""

from __future__ import annotations

import time

import pytest

from tests.agent.fakedocker import FakeDocker
from tests.agent.helpers import wait_for
from zen.agent import launch
from zen.agent.runner import JobSpec, RunningJob, container_name


@pytest.fixture
def docker(tmp_path, monkeypatch):
    monkeypatch.setattr("zen.agent.removal.REMOVE_PAUSE_S", 0.0, raising=False)
    return FakeDocker(tmp_path / "docker")


def run_out_of_lease(docker: FakeDocker, fence) -> RunningJob:
    spec = JobSpec(job_id="gpu", attempt=1, image="img:1", command=["train"], stop_grace_s=0.3)
    job = RunningJob.start(spec, local=False, docker=docker.path, lease_s=1.0, fence_file=str(fence))
    wait_for(lambda: docker.names() == [container_name("gpu", 1)], 10, what="the container running")
    return job


@pytest.mark.parametrize("daemon", ["fail", "hang"])
def test_a_container_docker_cannot_kill_when_the_lease_runs_out_powers_the_vm_off(docker, tmp_path, daemon):
    fence = tmp_path / "run" / "fence"
    fence.parent.mkdir()
    getattr(docker, daemon)("kill")
    began = time.monotonic()
    job = run_out_of_lease(docker, fence)
    wait_for(lambda: job.poll() is not None, 30, what="the supervisor's fence")
    # The lease (1 s) and grace (0.3 s) out, a kill docker did not answer (5 s) powers the VM off at once: not after
    # waiting for `docker run` (KILLED_S) and an inspect that would hang as long, past the fence's 15 s margin.
    assert daemon == "fail" or time.monotonic() - began < 1.3 + launch.DOCKER_KILL_S + launch.KILLED_S - 1.0
    assert docker.names() == [container_name("gpu", 1)]  # it runs on: only the VM's power-off ends it
    assert fence.exists(), "the VM was not powered off: the container runs on beside the job's rerun"
    assert container_name("gpu", 1) in fence.read_text()  # why, for the VM's log
    assert job.fenced()


def test_a_container_docker_kills_leaves_the_vm_on(docker, tmp_path):
    fence = tmp_path / "fence"
    job = run_out_of_lease(docker, fence)
    wait_for(lambda: job.poll() is not None, 30, what="the supervisor's fence")
    assert docker.names() == [] and not fence.exists()


def test_a_container_docker_killed_whose_docker_run_ends_late_leaves_the_vm_on(docker, tmp_path, monkeypatch):
    # The kill worked (docker says the container runs no more); its ``docker run`` ends a while after (its daemon slow
    # to answer, or its output pipe full while the agent hangs): no container runs beside the rerun.
    fence = tmp_path / "fence"
    docker.slow_exit(8.0)
    job = run_out_of_lease(docker, fence)
    wait_for(lambda: job.poll() is not None, 30, what="the supervisor's fence")
    assert docker.names() == []
    assert not fence.exists(), f"the VM was powered off though its container was killed: {fence.read_text()}"
