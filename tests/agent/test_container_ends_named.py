"""How a job's container ended, in words its user can act on, when the job's program did not choose its exit code.

- The kernel killed the container for want of memory (docker's ``State.OOMKilled``, exit 137): the job's message
  says so, with its container's memory limit; a plain SIGKILL (137 without it) is "exit code 137" as before.
- ``docker run`` failed before the job's command ran: 125 (docker's own error: an image it could not pull),
  126 and 127 (the command could not be run, or is not in the image) are the job's, FAILED, docker's line in
  the message saying so; one docker failed for the VM's sake (a GPU it cannot give, its GPU libraries missing,
  the attempt's container name taken, the image's pull cut short by the network or the registry, the GPUs' runtime or
  containerd's shim gone from the VM, 127 though it is) requeues the
  attempt and retires the VM, as a dead daemon does (``tests/agent/test_docker_failing_its_run.py``); an image that
  cannot be pulled for good (not found, denied, no such registry host) is the job's FAILED.
"""

from __future__ import annotations

import pytest

from tests.agent.fakedocker import FakeDocker
from tests.waiting import wait_for

IMAGE = "us-docker.pkg.dev/p/r/train:1"
HELP = "See 'docker run --help'.\n"


def run_on_a_vm(scheduler, agents, tmp_path, code: int, stderr: str = "", oom_killed: bool = False,
                started: bool = True):
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(code, stderr, oom_killed, started=started)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path)
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE)
    return docker


def test_a_job_killed_for_want_of_memory_is_told_so_with_its_memory_limit(scheduler, agents, tmp_path):
    docker = run_on_a_vm(scheduler, agents, tmp_path, 137, oom_killed=True)
    job = scheduler.wait_status("train-1", "FAILED", timeout_s=60)
    run = next(call for call in docker.calls() if call[0] == "run")
    limit = int(run[run.index("--memory") + 1].removesuffix("m")) / 1024  # MiB, as the agent set it
    assert job.exit_code == 137
    assert (job.message or "").startswith(
        f"zen: killed: out of memory (exit code 137): the job's container reached its memory limit, {limit:.1f} GiB "
        "(its share of the VM's memory"), job.message
    assert docker.names() == []  # its container is removed all the same
    assert scheduler.history("train-1")[-1][1:] == ("FAILED", "killed: out of memory (exit code 137)")  # zen explain


def test_a_job_killed_by_sigkill_with_memory_to_spare_is_told_its_exit_code_alone(scheduler, agents, tmp_path):
    docker = run_on_a_vm(scheduler, agents, tmp_path, 137)
    job = scheduler.wait_status("train-1", "FAILED", timeout_s=60)
    assert job.exit_code == 137 and "memory" not in (job.message or ""), job.message
    assert docker.names() == []


@pytest.mark.parametrize("code, line, told", [
    (127, 'docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI '
          'runtime create failed: runc create failed: unable to start container process: exec: "pythn": executable '
          'file not found in $PATH: unknown.', "the job's command was not found in its image"),
    (126, 'docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI '
          'runtime create failed: runc create failed: unable to start container process: exec: "/train.sh": '
          'permission denied: unknown.', "the job's command could not be run in its image"),
    (125, "docker: Error response from daemon: pull access denied for us-docker.pkg.dev/p/r/train, repository does "
          "not exist or may require 'docker login': denied: requested access to the resource is denied.",
     "docker could not run the job's container"),
    # The job's own command named like a program under docker (a job trying the GPUs' toolkit): still its command, not
    # in its image; read as the runtime gone, it was requeued free and retired VM after VM.
    (127, 'docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI '
          'runtime create failed: runc create failed: unable to start container process: exec: '
          '"nvidia-container-runtime": executable file not found in $PATH: unknown.',
     "the job's command was not found in its image"),
    (127, 'docker: Error response from daemon: OCI runtime create failed: runc create failed: unable to start '
          'container process: error during container init: exec: "/opt/containerd-shim/run": stat /opt/containerd-shim/run: no such file or directory: unknown.',
     "the job's command was not found in its image"),
    (127, 'docker: Error response from daemon: OCI runtime create failed: container_linux.go:380: starting container '
          'process caused: exec: "nvidia-container-cli": executable file not found in $PATH: unknown.',
     "the job's command was not found in its image"),
])
def test_a_command_docker_could_not_run_fails_the_job_with_dockers_line(scheduler, agents, tmp_path, code, line, told):
    run_on_a_vm(scheduler, agents, tmp_path, code, f"{line}\n{HELP}", started=False)  # docker's words
    job = scheduler.wait_status("train-1", "FAILED", timeout_s=60)
    assert job.exit_code == code
    assert (job.message or "").startswith(f"zen: {told} (exit code {code}, docker's: the job's command never ran): "
                                          f"{line}"), job.message
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "IDLE", 30, what="vm-a idle again")


@pytest.mark.parametrize("code, line", [
    (127, "docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI "
          "runtime create failed: runc create failed: unable to start container process: error during container "
          "init: error running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as "
          "'legacy'\nnvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot "
          "open shared object file: no such file or directory: unknown."),
    (125, 'docker: Error response from daemon: Conflict. The container name "/zen-train-1" is already in use by '
          'container "4f2a". You have to remove (or rename) that container to be able to reuse that name.'),
    (125, 'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].'),
    # The programs under docker gone (a package upgrade replacing them): docker's CLI answers 127 for their "no such
    # file", as for a command not in the image.
    (127, "docker: Error response from daemon: OCI runtime create failed: unable to retrieve OCI runtime error (open "
          "/run/containerd/io.containerd.runtime.v1.linux/moby/4f2a/log.json: no such file or directory): fork/exec "
          "/usr/bin/nvidia-container-runtime: no such file or directory: unknown."),
    (127, 'docker: Error response from daemon: failed to create task for container: failed to start shim: exec: '
          '"containerd-shim-runc-v2": executable file not found in $PATH: unknown.'),
    # The image's pull cut short: the registry's rate limit, its 5xx, the network's timeout (another VM pulls it again).
    (125, "docker: Error response from daemon: toomanyrequests: You have reached your pull rate limit. You may "
          "increase the limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit."),
    (125, 'docker: Error response from daemon: Head "https://us-docker.pkg.dev/v2/p/r/train/manifests/1": received '
          'unexpected HTTP status: 503 Service Unavailable.'),
    (125, 'docker: Error response from daemon: Get "https://us-docker.pkg.dev/v2/": net/http: request canceled while '
          'waiting for connection (Client.Timeout exceeded while awaiting headers).'),
])
def test_a_docker_run_the_vm_failed_requeues_the_attempt_and_retires_the_vm(scheduler, agents, tmp_path, code, line):
    run_on_a_vm(scheduler, agents, tmp_path, code, f"{line}\n{HELP}", started=False)  # docker's words
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 60, what="vm-a retired")
    job = wait_for(lambda: (job := scheduler.job("train-1")).attempt == 2 and job, 30, what="train-1 requeued")
    assert job.status.value == "QUEUED" and job.exit_code is None, (job.status, scheduler.history("train-1"))
    said = (job.message or "").partition("docker could not start a job's container: ")[2]  # docker's line
    assert said and any(said.startswith(part) for part in line.splitlines()), job.message


def test_a_jobs_own_126_or_127_is_told_by_its_exit_code_alone():
    """A shell in the job's image that could not find or run a command exits 127 or 126 itself: no ``docker:`` line,
    no note, and never the VM's fault, whatever its output says."""
    from zen.agent.container import GIB, docker_fault, exit_note

    assert exit_note(127, "train.sh: line 3: pythn: command not found\n", False, GIB) is None
    assert exit_note(126, "train.sh: line 3: ./prep: Permission denied\n", False, GIB) is None
    assert docker_fault("zen-train-1", 127, "cp: cannot write: no space left on device\n") is None


def test_the_runtime_under_docker_gone_is_the_vms_and_a_command_not_in_the_image_the_jobs():
    """The GPUs' hook, containerd's socket, a runtime docker no longer knows: the VM's, whatever exit code docker's CLI
    chose for them; a command not in the image (127, ``executable file not found`` too) stays the job's."""
    from zen.agent.container import docker_fault

    for code, line in (
            (127, "docker: Error response from daemon: failed to create task for container: failed to create shim "
                  "task: OCI runtime create failed: runc create failed: unable to start container process: error "
                  "during container init: error running hook #0: fork/exec /usr/bin/nvidia-container-runtime-hook: no "
                  "such file or directory: unknown."),
            (125, "docker: Error response from daemon: failed to create task for container: connection error: desc = "
                  '"transport: Error while dialing: dial unix:///run/containerd/containerd.sock: connect: connection '
                  'refused": unavailable.'),
            (125, "docker: Error response from daemon: unknown or invalid runtime name: nvidia."),
            (125, "docker: Error response from daemon: Unknown runtime specified nvidia.")):
        assert docker_fault("zen-train-1-abc-1", code, f"{line}\n{HELP}") == line[:300], line  # (its first 300)
    own = ('docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI '
           'runtime create failed: runc create failed: unable to start container process: exec: "pythn": executable '
           'file not found in $PATH: unknown.')
    assert docker_fault("zen-train-1-abc-1", 127, f"{own}\n{HELP}") is None


def test_an_image_that_cannot_be_pulled_for_good_retires_no_vm():
    """Not found, access denied, a registry host that does not resolve: every VM's pull would fail alike (a mistyped
    image or registry), so it is the job's FAILED with docker's line, not a VM retired after another."""
    from zen.agent.container import docker_fault

    for line in ("docker: Error response from daemon: manifest for us-docker.pkg.dev/p/r/train:9 not found: manifest "
                 "unknown: Failed to fetch \"9\".",
                 'docker: Error response from daemon: Get "https://us-docker.pkg.devv/v2/": dial tcp: lookup '
                 "us-docker.pkg.devv on 169.254.169.254:53: no such host."):
        assert docker_fault("zen-train-1-abc-1", 125, f"{line}\n{HELP}") is None, line
    cut = ('docker: Error response from daemon: Get "https://us-docker.pkg.dev/v2/": dial tcp: lookup us-docker.pkg.dev '
           "on 169.254.169.254:53: read udp 10.128.0.5:40000->169.254.169.254:53: i/o timeout.")
    assert docker_fault("zen-train-1-abc-1", 125, f"{cut}\n{HELP}") == cut  # its lookup timed out: passing


def test_a_jobs_own_exit_125_and_a_failure_every_vm_would_share_retire_no_vm():
    """A job that exits 125 itself prints no line of docker's, whatever it prints; and an option of Zen's that this
    VM's docker does not know would fail on every VM of its template: each is the job's FAILED (the second with
    docker's line), not a VM retired after another."""
    from zen.agent.container import docker_fault, exit_note

    own = "Error: unknown flag: --epochs\nUsage:\n  trainer [flags]\n"
    assert docker_fault("zen-train-1-abc-1", 125, own) is None and exit_note(125, own, False, None) is None
    unknown = "unknown flag: --pids-limit\nSee 'docker run --help'.\n"
    assert docker_fault("zen-train-1-abc-1", 125, unknown) is None
    assert exit_note(125, unknown, False, None) == ("zen: docker could not run the job's container (exit code 125, "
                                                    "docker's: the job's command never ran): unknown flag: --pids-limit")


def test_a_container_zen_stopped_is_not_asked_whether_it_ran_out_of_memory(scheduler, agents, tmp_path):
    """A user's stop kills the container (137): its end is Zen's doing, and docker is not asked whether it ran out of
    memory (its supervisor asks only whether it still runs, as after any end of its CLI: ``zen.agent.launch``)."""
    docker = FakeDocker(tmp_path / "docker")
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path)
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE)
    scheduler.wait_status("train-1", "RUNNING", timeout_s=60)
    scheduler.stop("train-1")
    scheduler.wait_status("train-1", "CANCELLED", timeout_s=60)
    assert [call for call in docker.calls() if call[0] == "inspect" and "{{.State.OOMKilled}}" in call] == []
