"""A job's output and docker's own errors reach the agent as one stream (``docker run`` attached), so a job that
prints what docker prints when it fails (``docker: Cannot connect to the Docker daemon ...``, the help line after it:
a docker CLI run inside the job, or words written on purpose) and exits 125 itself read as docker's failure: its VM
retired and its attempt requeued free, on VM after VM, whatever its ``max_attempts``. Docker's state says whose code
it is: the job's container ran and ``exited`` 125, so the end is the job's FAILED, and its VM takes the next job."""

from __future__ import annotations

from tests.agent.fakedocker import FakeDocker
from tests.agent.test_container_ends_named import HELP, IMAGE
from tests.waiting import wait_for
from zen.agent.runner import container_name

SAID = ("docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n"
        f"{HELP}")
LOST = 'time="2026-12-06T17:50:01Z" level=error msg="error waiting for container: unexpected EOF"\n'


def test_a_job_that_exits_125_in_dockers_words_fails_and_its_vm_runs_on(scheduler, agents, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(125, SAID + LOST, only=container_name("train-1", 1))  # the job's own process: it ran, exited 125
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path)
    scheduler.submit("train-1", ["sh", "-c", "docker run busybox; exit 125"], image=IMAGE, max_attempts=1)

    job = wait_for(lambda: (job := scheduler.job("train-1")) and (job.attempt == 2 or job.status.value == "FAILED")
                   and job, 60, what="train-1 ended or requeued")
    assert (job.status.value, job.attempt, job.exit_code) == ("FAILED", 1, 125), (job.status.value, job.message,
                                                                                   scheduler.history("train-1"))
    assert "docker could not" not in (job.message or ""), job.message
    scheduler.submit("train-2", ["python", "train.py"], image=IMAGE)  # the VM was not retired: it takes this one
    assert scheduler.wait_status("train-2", "RUNNING", timeout_s=60).vm == "vm-a"
    assert (scheduler.vm("vm-a") or {}).get("state") != "RETIRED"


def test_whose_125_it_is_docker_says_not_the_output(tmp_path):
    """The same lines, the same exit code: docker's when it failed the start (``created``), the job's when its process
    ran and exited so; a job's own 126 or 127 has no note of docker's either, and a host process asks docker nothing."""
    from tests.agent.test_confinement import BIG, spec
    from zen.agent.container import Sandbox
    from zen.agent.container_end import container_end
    from zen.agent.runner import RunningJob

    def end_of(where: str, code: int, started: bool):
        docker = FakeDocker(tmp_path / where)
        docker.ends(code, SAID, started=started)
        return RunningJob.start(spec((0,), sandbox=Sandbox(shape=BIG)), local=False, docker=docker.path).outcome()

    dockers = end_of("dockers", 125, started=False)
    assert not dockers.ran and (dockers.note or "").startswith("zen: docker could not run the job's container"), dockers
    own = end_of("own", 125, started=True)
    assert own.ran and own.note is None and "Cannot connect to the Docker daemon" in own.tail, own
    assert end_of("own-127", 127, started=True).note is None
    assert container_end(None, 125, stopped=False) == (False, False)
