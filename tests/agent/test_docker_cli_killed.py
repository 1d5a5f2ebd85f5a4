"""The ``docker run`` CLI of a job's container killed while the container runs on: the kernel's OOM killer picked the
CLI (not the container), something on the VM sent it SIGKILL, or it crashed. Docker's daemon runs the container, not
its CLI: the job goes on. The job's supervisor (``launch.py``) asks docker whether the container still runs, follows
it (``docker attach``) and exits with the container's own exit code, which the agent reports as the job's. It was the
job's FAILED, exit code 137 (the CLI's ``128 + 9``), its container removed by force under the running job, an attempt
charged to its user for the CLI's end. A CLI killed when docker cannot say whether its container runs is docker's
lost container (``tests/agent/test_docker_lost_while_running.py``): the VM's fault, requeued free, never the job's
failure."""

from __future__ import annotations

import os
import signal

from tests.agent.fakedocker import FakeDocker
from tests.waiting import wait_for

IMAGE = "us-docker.pkg.dev/p/r/train:1"


def the_cli_killed(scheduler, agents, docker: FakeDocker) -> str:
    """vm-a runs train-1; its container's ``docker run`` CLI killed (SIGKILL) while the container runs: its name."""
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path)
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE)
    name = wait_for(lambda: next(iter(docker.names()), None), 60, what="train-1's container running")
    pid = wait_for(lambda: docker.cli_pid(name), 10, what="its docker run CLI")
    wait_for(lambda: (job := scheduler.job("train-1")) and job.status.value == "RUNNING", 30, what="train-1 RUNNING")
    os.kill(pid, signal.SIGKILL)  # the CLI alone: the container runs on
    return name


def test_a_job_whose_docker_cli_was_killed_is_followed_to_its_own_end(scheduler, agents, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    name = the_cli_killed(scheduler, agents, docker)
    job = wait_for(lambda: (job := scheduler.job("train-1")) and (docker.attached(name)
                                                                   or job.status.value != "RUNNING") and job,
                   30, what="its container followed, or train-1 ended")
    assert job.status.value == "RUNNING" and job.attempt == 1, (job.status, job.exit_code, job.message)
    assert docker.names() == [name]  # the job runs on, its container not removed under it
    docker.finish(name, 3)  # the job's own end, its own exit code
    job = scheduler.wait_status("train-1", "FAILED", timeout_s=60)
    assert job.exit_code == 3 and job.attempt == 1, (job.exit_code, job.message)
    assert "attached to " + name in (job.message or ""), job.message  # its output after the CLI's end, too
    wait_for(lambda: docker.names() == [], 30, what="its container removed once it ended")


def test_a_job_whose_docker_cli_was_killed_and_whose_container_docker_cannot_see_is_requeued(scheduler, agents,
                                                                                                 tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.fail("inspect")  # docker cannot say whether the container runs
    the_cli_killed(scheduler, agents, docker)
    job = wait_for(lambda: (job := scheduler.job("train-1")) and (
        job.status.value in ("FAILED", "SUCCEEDED") or job.attempt == 2) and job, 60, what="train-1 ended or requeued")
    assert job.status.value == "QUEUED" and job.exit_code is None, (job.status, job.exit_code, job.message)
    assert "docker lost a job's container while it ran" in (job.message or ""), job.message
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 30, what="vm-a retired")


def test_the_supervisor_reads_a_killed_cli_by_what_docker_says_of_its_container(tmp_path):
    from zen.agent import launch

    docker = FakeDocker(tmp_path / "docker")
    killed, exited = signal.SIGKILL, lambda code: code << 8  # wait statuses: by a signal, an exit
    docker.add("zen-a", "id-a")  # running
    assert launch._cli_ended(docker.path, "zen-a", killed, 0) == [docker.path, "attach", "--no-stdin", "zen-a"]
    assert launch._cli_ended(docker.path, "zen-a", exited(2), 0)[1] == "attach"  # a CLI crashed (Go's exit 2)
    assert launch._cli_ended(docker.path, "zen-a", killed, launch.FOLLOWS) == 125  # followed enough: lost
    docker.finish("zen-a", 137)  # the job itself killed in its container (its own OOM kill): its own 137
    assert launch._cli_ended(docker.path, "zen-a", killed, 0) == 137
    docker.finish("zen-a", 3)
    assert launch._cli_ended(docker.path, "zen-a", exited(1), 1) == 3  # an attach that came too late: the container's
    assert launch._cli_ended(docker.path, "zen-a", exited(125), 0) == 125  # a ``docker run``'s own exit kept
    docker.fail("inspect")
    assert launch._cli_ended(docker.path, "zen-a", exited(137), 0) == 137  # docker's answer to the CLI's wait
    assert launch._cli_ended(docker.path, "zen-a", killed, 0) == 125  # killed, docker silent: lost


def test_a_container_docker_never_started_is_no_exit_of_its_job(tmp_path):
    """The CLI killed between the container's create and its start (or while docker starts it: ``--gpus``' hook takes
    seconds): docker says the container runs not, its exit code 0, as it says of one that exited 0. The job never ran,
    or starts once the CLI is gone: not its exit 0 (SUCCEEDED, and then its container removed under it), but docker's
    lost container (the VM's fault, requeued free)."""
    from zen.agent import launch

    docker = FakeDocker(tmp_path / "docker")
    docker.add("zen-a", "id-a")
    docker.created("zen-a")
    assert launch._cli_ended(docker.path, "zen-a", signal.SIGKILL, 0) == 125
    assert launch._cli_ended(docker.path, "zen-a", 125 << 8, 0) == 125  # docker failed its start: the CLI's 125 kept
