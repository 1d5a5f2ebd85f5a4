"""Docker's own error, as the docker CLI 28 prints it: ``docker: <error>``, a blank line, then ``Run 'docker run
--help' for more information`` (the CLI before it: ``See 'docker run --help'.`` right after the error), for an error
of the container's creation (a start's error has no help line: tests/agent/test_docker_start_error_lines.py). An error
of several lines keeps its cause on the last one: the GPUs' runtime failing says so on the line after ``docker: ...``
(``nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1 ...``, exit 127; here with a
help line after it). Read as docker's only before the older help line, that line went unread: the VM's missing GPU
libraries were the job's FAILED, "the job's command was not found in its image", charged to its user, and the VM went
on claiming job after job to fail each alike. A flag error prints docker's usage line between its error and the help
line; the error is still docker's line (``zen.agent.container.docker_lines``).

The GPUs' runtime refusing the image's own requirement (``NVIDIA_REQUIRE_CUDA``: "requirement error: unsatisfied
condition: cuda>=12.8, please update your driver ...") names nvidia-container-cli too, and was taken for the VM's GPU
runtime broken: the VM retired and the attempt requeued, VM after VM of the cluster, each with the same driver, until
the job's free preemptions were spent. The image needs a newer driver than the cluster's VMs have: the job's FAILED,
at once, with that line (``zen.agent.container.IMAGE_REQUIRES``)."""

from __future__ import annotations

from tests.agent.fakedocker import FakeDocker
from tests.agent.test_container_ends_named import IMAGE
from tests.waiting import wait_for

RUN_HELP = "\nRun 'docker run --help' for more information\n"  # docker 28's words after its error
NO_GPU_LIBRARY = ("docker: Error response from daemon: failed to create task for container: failed to create shim "
                  "task: OCI runtime create failed: runc create failed: unable to start container process: error "
                  "during container init: error running prestart hook #0: exit status 1, stdout: , stderr: "
                  "Auto-detected mode as 'legacy'\n"
                  "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open "
                  "shared object file: no such file or directory: unknown" + RUN_HELP)


def test_the_gpu_runtimes_failure_on_dockers_second_line_is_the_vms():
    from zen.agent.container import docker_fault

    said = docker_fault("zen-train-1-abc-1", 127, NO_GPU_LIBRARY)
    assert said is not None and said.startswith("nvidia-container-cli: initialization error"), said


def test_a_flag_docker_28_refuses_is_told_with_dockers_line():
    from zen.agent.container import docker_fault, exit_note

    unknown = "unknown flag: --pids-limit\n\nUsage:  docker run [OPTIONS] IMAGE [COMMAND] [ARG...]" + RUN_HELP
    assert docker_fault("zen-train-1-abc-1", 125, unknown) is None  # every VM of the template alike: the job's
    assert exit_note(125, unknown, False, None) == ("zen: docker could not run the job's container (exit code 125, "
                                                    "docker's: the job's command never ran): unknown flag: --pids-limit")


def test_a_vm_without_its_gpu_libraries_under_docker_28_requeues_the_attempt_and_retires(scheduler, agents, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(127, NO_GPU_LIBRARY, started=False)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path)
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE)
    job = wait_for(lambda: (job := scheduler.job("train-1")) and (job.attempt == 2 or job.status.value == "FAILED")
                   and job, 60, what="train-1 ended or requeued")
    assert (job.status.value, job.attempt, job.exit_code) == ("QUEUED", 2, None), (job.status.value, job.message)
    assert "docker could not start a job's container: nvidia-container-cli: initialization error" in (
        job.message or ""), job.message
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 60, what="vm-a retired")


REQUIRES = ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please update your driver to a "
            "newer version, or use an earlier cuda container")
REQUIRES_28 = NO_GPU_LIBRARY.replace(NO_GPU_LIBRARY.splitlines()[1], REQUIRES)  # docker 28: on a line of its own
REQUIRES_OLD = ("docker: Error response from daemon: OCI runtime create failed: container_linux.go:370: starting "
                "container process caused: process_linux.go:459: container init caused: Running hook #0:: error running "
                f"hook: exit status 1, stdout: , stderr: {REQUIRES}: unknown.\nSee 'docker run --help'.\n")


def test_an_image_needing_a_newer_driver_than_the_vms_is_the_jobs():
    from zen.agent.container import docker_fault, exit_note

    for tail in (REQUIRES_OLD, REQUIRES_28):
        assert docker_fault("zen-train-1-abc-1", 125, tail) is None, tail
        note = exit_note(125, tail, False, None) or ""
        assert note.startswith("zen: docker could not run the job's container (exit code 125, docker's: the job's "
                               "command never ran): ") and "unsatisfied condition: cuda>=12.8, please update your driver" in note


def test_an_image_needing_a_newer_driver_fails_at_once_and_retires_no_vm(scheduler, agents, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(125, REQUIRES_OLD, started=False)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path)
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE)
    job = scheduler.wait_status("train-1", "FAILED", timeout_s=60)
    assert (job.attempt, job.exit_code) == (1, 125) and "cuda>=12.8" in (job.message or ""), job.message
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "IDLE", 30, what="vm-a idle again")


SOCKET_DENIED = ("docker: permission denied while trying to connect to the Docker daemon socket at "
                 "unix:///var/run/docker.sock: Head \"http://%2Fvar%2Frun%2Fdocker.sock/_ping\": dial unix "
                 "/var/run/docker.sock: connect: permission denied" + RUN_HELP)


def test_a_docker_socket_the_agent_may_not_use_is_the_vms():
    """Docker 28 exits 126 when its socket refuses the agent's user (a VM whose docker group or socket mode was
    changed): read as the job's, "the job's command could not be run in its image" was false, the job FAILED and the
    VM went on claiming jobs to fail each alike. It is the VM's: requeued free, the VM retired."""
    from zen.agent.container import docker_fault

    said = docker_fault("zen-train-1-abc-1", 126, SOCKET_DENIED)
    assert said is not None and said.startswith("docker: permission denied while trying to connect"), said
