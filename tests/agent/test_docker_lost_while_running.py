"""A docker daemon that crashes (or is restarted) while a job's container runs: the ``docker run`` attached to it loses
its wait for the container's end and exits 125, its CLI logging ``error waiting for container: unexpected EOF`` (a
logrus line, ``level=error msg="..."``; ``ERRO[0042] ...`` on a terminal), with no ``docker: ...`` line. How the job
ended is unknown: its end is the VM's, not the job's. The attempt is requeued free (PREEMPTED, docker's line its
reason) and the VM takes no more jobs, as for a daemon found dead at the start
(``tests/agent/test_docker_failing_its_run.py``). It was the job's FAILED, exit code 125, an attempt charged to its user
(and with ``max_retries`` 0 its end) for its VM's docker dying under it."""

from __future__ import annotations

import pytest

from tests.agent.fakedocker import FakeDocker
from tests.waiting import wait_for

IMAGE = "us-docker.pkg.dev/p/r/train:1"
LOST = 'time="2026-12-06T17:50:01Z" level=error msg="error waiting for container: unexpected EOF"\n'


# The daemon's own answer to the wait an error: docker's CLI logs it capitalized.
ANSWERED = 'time="2026-12-06T17:50:01Z" level=error msg="Error waiting for container: context canceled"\n'


@pytest.mark.parametrize("lost", [LOST, ANSWERED])
def test_a_job_whose_docker_daemon_died_under_it_is_requeued_not_failed(scheduler, agents, tmp_path, lost):
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(125, "epoch 3/10: loss 0.41\n" + lost, started=False)  # the job's last line, then the CLI's
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path)
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE)

    job = wait_for(lambda: (job := scheduler.job("train-1")) and (
        job.status.value in ("FAILED", "SUCCEEDED") or job.attempt == 2) and job, 60, what="train-1 ended or requeued")
    assert job.status.value == "QUEUED" and job.exit_code is None, (job.status, job.exit_code, job.message)
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 30, what="vm-a retired")
    said = lost.partition('msg="')[2].rstrip('"\n')
    assert f"docker lost a job's container while it ran: e{said[1:]}" in (job.message or ""), job.message
    assert docker.names() == []  # its container removed all the same


@pytest.mark.parametrize("line", [
    'time="2026-12-06T17:50:01Z" level=error msg="error waiting for container: unexpected EOF"',
    "ERRO[0042] error waiting for container: EOF",
    'time="2026-12-06T17:50:01Z" level=error msg="Error waiting for container: context canceled"',
])
def test_dockers_lost_wait_is_the_vms_fault(line):
    from zen.agent.container import docker_fault, exit_note

    said = line.partition('msg="')[2].rstrip('"') or line.partition("] ")[2]
    said = "e" + said[1:]  # (said so whichever the CLI's words)
    assert docker_fault("zen-train-1-abc-1", 125, f"step 9\n{line}\n") == said
    assert docker_fault(None, 125, f"{line}\n") is None  # a host process: no docker
    assert docker_fault("zen-train-1-abc-1", 1, f"{line}\n") is None  # the job's own exit code: its own end
    assert exit_note(125, f"{line}\n", False, None) is None  # not "the job's command never ran"


def test_a_job_printing_such_words_without_dockers_form_is_its_own_125():
    from zen.agent.container import docker_fault

    assert docker_fault("zen-train-1-abc-1", 125, "error waiting for container: unexpected EOF\n") is None
