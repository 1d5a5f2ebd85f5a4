"""A pull the registry or the VM's network cut short is the VM's or a passing fault, in whichever words docker says
it. Docker's own pull says a registry's 5xx as ``received unexpected HTTP status: 503 ...``; with the containerd image
store (the default of newer docker installs) containerd's words come instead: ``unexpected status from HEAD request to
URL: 503 Service Unavailable``, and Docker Hub's rate limit on its token as ``failed to fetch oauth token: unexpected
status from POST request to ...: 429 Too Many Requests`` (no ``toomanyrequests`` on the line). The VM's resolver
failing (``server misbehaving``), its network down (``network is unreachable``) and a registry closing its connection
(Docker Hub's ``Get ...: EOF``) are passing too. Each was the job's FAILED, exit code 125, charged to its user (a job
of ``max_attempts`` 1 over for a registry's bad minute); now the attempt is requeued free and the VM retires, as for
the words ``zen.agent.container.PULL_CUT`` knew. A registry that answers 4xx (not found, denied) is still the job's."""

from __future__ import annotations

import pytest

from tests.agent.fakedocker import FakeDocker
from tests.agent.test_container_ends_named import HELP, IMAGE
from tests.waiting import wait_for
from zen.agent.container import docker_fault

CONTAINER = "zen-train-1-abc-1"
PASSING = [
    'docker: Error response from daemon: failed to resolve reference "us-docker.pkg.dev/p/r/train:1": unexpected '
    "status from HEAD request to https://us-docker.pkg.dev/v2/p/r/train/manifests/1: 503 Service Unavailable.",
    'docker: Error response from daemon: failed to resolve reference "docker.io/library/python:3.11": failed to '
    "authorize: failed to fetch oauth token: unexpected status from POST request to https://auth.docker.io/token: "
    "429 Too Many Requests.",
    "docker: failed to copy: httpReadSeeker: failed open: unexpected status code "
    "https://us-docker.pkg.dev/v2/p/r/train/blobs/sha256:4f2a: 502 Bad Gateway.",
    'docker: Error response from daemon: Get "https://us-docker.pkg.dev/v2/": dial tcp: lookup us-docker.pkg.dev on '
    "169.254.169.254:53: server misbehaving.",
    'docker: Error response from daemon: Get "https://us-docker.pkg.dev/v2/": dial tcp 142.250.1.82:443: connect: '
    "network is unreachable.",
    'docker: Error response from daemon: Get "https://registry-1.docker.io/v2/": EOF.',
]
THE_JOBS = [
    'docker: Error response from daemon: failed to resolve reference "us-docker.pkg.dev/p/r/trian:1": '
    "us-docker.pkg.dev/p/r/trian:1: not found.",
    'docker: Error response from daemon: failed to resolve reference "us-docker.pkg.dev/p/r/train:1": unexpected '
    "status from HEAD request to https://us-docker.pkg.dev/v2/p/r/train/manifests/1: 403 Forbidden.",
    "docker: failed to copy: httpReadSeeker: failed open: unexpected status code "
    "https://registry.example.com:5000/v2/train/manifests/1: 401 Unauthorized.",
]


@pytest.mark.parametrize("line", PASSING)
def test_a_pull_cut_short_in_any_of_dockers_words_is_the_vms(line):
    assert docker_fault(CONTAINER, 125, f"Unable to find image 'x' locally\n{line}\n{HELP}") == line


@pytest.mark.parametrize("line", THE_JOBS)
def test_a_registry_that_refuses_the_image_is_the_jobs(line):
    assert docker_fault(CONTAINER, 125, f"{line}\n{HELP}") is None


def test_a_registrys_5xx_in_containerds_words_requeues_a_job_of_one_attempt(scheduler, agents, tmp_path):
    line = PASSING[0]
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(125, f"Unable to find image '{IMAGE}' locally\n{line}\n{HELP}", started=False)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path)
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE, max_attempts=1)

    job = wait_for(lambda: (job := scheduler.job("train-1")) and (job.attempt == 2 or job.status.value == "FAILED")
                   and job, 60, what="train-1 ended or requeued")
    assert (job.status.value, job.attempt, job.exit_code) == ("QUEUED", 2, None), (job.status.value, job.message)
    assert f"docker could not start a job's container: {line}" in (job.message or ""), job.message
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 60, what="vm-a retired")
