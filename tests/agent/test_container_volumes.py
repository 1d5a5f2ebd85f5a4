"""An image that declares a ``VOLUME`` (``VOLUME /data``) gets an anonymous volume for each container docker runs
of it: writable despite ``--read-only``, kept on the VM's disk under docker's folder, not in the attempt's
directory. ``docker run --rm`` removes it with the container; ``docker rm -f`` alone does not. Since the agent
removes its containers itself (``zen.agent.removal``: no ``--rm``, so docker can still say whether one ran out of
memory), every removal must ask for the volumes too (``-v``): otherwise what one user's job wrote there stays
on a VM that runs the next user's job, and fills its disk job after job. Against a stand-in docker (``fakedocker``)."""

from __future__ import annotations

import pytest

from tests.agent.fakedocker import FakeDocker
from tests.agent.helpers import wait_for
from zen.agent.removal import remove_container, remove_leftover_containers
from zen.agent.runner import JobSpec, RunningJob, container_name


@pytest.fixture
def docker(tmp_path, monkeypatch):
    monkeypatch.setattr("zen.agent.removal.REMOVE_PAUSE_S", 0.0)
    fake = FakeDocker(tmp_path / "docker")
    fake.image_declares_volume()
    return fake


def start(docker: FakeDocker, job_id: str) -> RunningJob:
    return RunningJob.start(JobSpec(job_id=job_id, attempt=1, image="img:1", command=["train"]), local=False,
                            docker=docker.path)


def test_a_job_that_ended_leaves_no_volume_of_its_image_on_the_vm(docker):
    docker.ends(1)
    job = start(docker, "user-a-job")
    assert job.outcome().exit_code == 1
    assert docker.names() == [] and docker.volumes() == []


def test_a_stopped_job_leaves_no_volume_of_its_image_on_the_vm(docker):
    docker.kill_keeps()  # as docker's kill: the container ends and stays until removed
    job = start(docker, "user-a-job")
    wait_for(lambda: docker.names() == [container_name("user-a-job", 1)], 10, what="the container running")
    job.stop(grace_s=0.2)
    assert docker.names() == [] and docker.volumes() == []


def test_a_container_removed_by_name_goes_with_its_volumes(docker):
    name = container_name("user-a-job", 1)
    docker.add(name, "c1", volume=True)
    assert remove_container(name, docker.path) is True
    assert docker.volumes() == []


def test_an_earlier_agents_containers_go_with_their_volumes_before_the_next_job(docker):
    docker.add("zen-a-1", "c1", volume=True)
    docker.add("zen-b-1", "c2", volume=True)
    assert remove_leftover_containers(docker.path) == ["c1", "c2"]
    assert docker.volumes() == []
