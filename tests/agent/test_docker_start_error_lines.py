"""Docker's error of a container's start, as its CLI prints it: ``docker: <error>`` and the error's further lines, with
no help line after it in any version (the CLI adds ``See 'docker run --help'.``, or docker 28's ``Run 'docker run
--help' ...``, only to an error of the container's creation or of its flags). The GPUs' runtime failing its hook says
why on the error's second line (``...stderr: Auto-detected mode as 'legacy'``, then ``nvidia-container-cli: ...``).
Read only before a help line, that line went unread: a VM without its GPU libraries was the job's FAILED, "the job's
command was not found in its image" (exit 127: "no such file"), and the VM kept claiming jobs to fail each alike; an
image needing a newer driver than the VMs have was told without the version it needs.

An older CLI also logs its wait for the container cut short after such an error (``level=error msg="error waiting for
container: context canceled"``): taken for docker losing the container while the job ran, the image's requirement was
the VM's fault, the VM retired and the attempt requeued, VM after VM of the cluster, each with the same driver."""

from __future__ import annotations

from tests.agent.fakedocker import FakeDocker
from tests.agent.test_container_ends_named import IMAGE
from tests.waiting import wait_for

HOOK = ("docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI "
        "runtime create failed: runc create failed: unable to start container process: error during container init: "
        "error running prestart hook #0: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n")
NO_GPU_LIBRARY = HOOK + ("nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot "
                         "open shared object file: no such file or directory: unknown.\n")
REQUIRES = HOOK + ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please update your "
                   "driver to a newer version, or use an earlier cuda container: unknown.\n")
WAIT_CUT = 'time="2026-12-07T01:30:00Z" level=error msg="error waiting for container: context canceled"\n'


def test_the_gpu_runtimes_failure_on_the_errors_second_line_is_the_vms():
    from zen.agent.container import docker_fault

    said = docker_fault("zen-train-1-abc-1", 127, NO_GPU_LIBRARY)
    assert said is not None and said.startswith("nvidia-container-cli: initialization error"), said


def test_an_image_needing_a_newer_driver_is_the_jobs_with_the_version_it_needs():
    from zen.agent.container import docker_fault, exit_note, lost_while_running

    for tail in (REQUIRES, REQUIRES + WAIT_CUT, REQUIRES + "ERRO[0000] error waiting for container: context canceled\n"):
        assert docker_fault("zen-train-1-abc-1", 125, tail) is None, tail
        assert not lost_while_running("zen-train-1-abc-1", 125, tail), tail
        note = exit_note(125, tail, False, None) or ""
        assert "unsatisfied condition: cuda>=12.8, please update your driver" in note, note


def test_an_image_needing_a_newer_driver_fails_at_once_under_an_older_cli(scheduler, agents, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(125, REQUIRES + WAIT_CUT, started=False)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path)
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE)
    job = wait_for(lambda: (job := scheduler.job("train-1")) and (job.attempt == 2 or job.status.value == "FAILED")
                   and job, 60, what="train-1 ended or requeued")
    assert (job.status.value, job.attempt, job.exit_code) == ("FAILED", 1, 125), (job.status.value, job.message)
    assert "cuda>=12.8" in (job.message or ""), job.message
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "IDLE", 30, what="vm-a idle again")


def test_the_output_after_dockers_error_is_not_read_as_dockers_past_its_lines():
    """The lines after ``docker: ...`` read as its error's are bounded (``GOES_ON``): a job's own output that exits 127
    after printing a ``docker: ...`` line (a tool of its own calling docker) is not all taken for docker's, where a
    "no space left on device" of the job's would have retired the VM and requeued the job free."""
    from zen.agent.container import docker_fault

    tail = "docker: 'compose' is not a docker command.\nbuilding...\nstep 1\nstep 2\nwrite: no space left on device\n"
    assert docker_fault("zen-train-1-abc-1", 127, tail) is None
