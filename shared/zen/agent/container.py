"""What a job's container may do to its VM and its neighbours: as little as docker allows.

``container_options(spec, sandbox)`` is what ``zen.agent.runner.docker_argv`` puts between ``docker run``
and the image: a user not root, no capabilities, a read-only root, its slot's share of the VM's memory,
CPUs and tasks (``Shape``, ``slot_limits``), and a network of its own per slot (``ensure_networks``);
the cluster's ``containers:`` opts out of some of it.
Why: docs/reference/agent.md#a-jobs-container
"""

from __future__ import annotations

import logging
import math
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Mapping, Protocol

from zen.core.retries import OUT_OF_MEMORY

log = logging.getLogger("zen.agent.container")

NOBODY = "65534:65534"  # uid:gid of the unprivileged user most images know (and any image may run as)
IMAGE_USER = "image"  # run_as: the image's own USER (the opt-out; root for most images)
GIB = 1024 ** 3
MIB = 1024 ** 2
RESERVED_MEMORY_SHARE = 0.05  # of the VM's memory, kept for the system, the agent and docker ...
RESERVED_MEMORY_MIN = 1 * GIB  # ... at least this ...
RESERVED_MEMORY_MAX = 4 * GIB  # ... and at most this
RESERVED_CPUS = 0.5  # kept for the agent and docker, on VMs of 2 CPUs or more
TASK_SHARE = 0.75  # of the kernel's task limit, shared among the slots
MIN_TASKS = 256  # a job's task limit, however small the VM's
OOM_SCORE_ADJ = 500  # a job's processes go before the agent's (0) when the VM runs out of memory
NETWORK_OPTIONS = ["--driver", "bridge", "--opt", "com.docker.network.bridge.enable_icc=false"]
BRIDGE_PREFIX = "docker-"  # of a slot network's bridge on the VM (``bridge_name``), within Linux's 15 characters
DOCKER_TIMEOUT_S = 30.0  # each docker network call


@dataclass(frozen=True)
class Shape:
    """The VM a job's slot is a share of."""

    memory_bytes: int
    cpus: int
    gpus: int = 1
    max_jobs: int = 1
    tasks: int = 32768  # the kernel's task limit: min(kernel.pid_max, kernel.threads-max)
    tasks_per_job: int | None = None  # ZEN_AGENT_TASKS_PER_JOB: given, every job's task limit whatever its share

    @classmethod
    def of_host(cls, gpus: int, max_jobs: int, proc: Path = Path("/proc"),
                tasks_per_job: int | None = None) -> "Shape":
        """This machine's memory (``MemTotal``), CPUs and task limit, with the VM's GPUs and jobs at once."""
        memory = None
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024  # kB
        if memory is None:
            raise ValueError(f"no MemTotal in {proc / 'meminfo'}")
        limits = []
        for name in ("pid_max", "threads-max"):
            try:
                limits.append(int((proc / "sys" / "kernel" / name).read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
        return cls(memory_bytes=memory, cpus=os.cpu_count() or 1, gpus=gpus, max_jobs=max_jobs,
                   tasks=min(limits) if limits else cls.tasks, tasks_per_job=tasks_per_job)


@dataclass(frozen=True)
class SlotLimits:
    memory_bytes: int
    cpus: float
    tasks: int


def reserved_memory(memory_bytes: int) -> int:
    """What a VM keeps for its system, the agent and docker: 5 %, at least 1 GiB, at most 4 GiB, and never
    more than half of it."""
    kept = min(max(memory_bytes * RESERVED_MEMORY_SHARE, RESERVED_MEMORY_MIN), RESERVED_MEMORY_MAX)
    return int(min(kept, memory_bytes / 2))


def share(shape: Shape, gpu_ids: tuple[int, ...] | None) -> float:
    """The slot's share of the VM: its GPUs over the VM's; the whole VM when it holds all of them (None)."""
    if gpu_ids is None:
        return 1.0
    return min(1.0, len(gpu_ids) / max(1, shape.gpus))


def slot_limits(shape: Shape, gpu_ids: tuple[int, ...] | None) -> SlotLimits:
    """A job's memory, CPUs and tasks on a VM of ``shape``, holding ``gpu_ids`` (None: the whole VM)."""
    part = share(shape, gpu_ids)
    memory = (shape.memory_bytes - reserved_memory(shape.memory_bytes)) * part
    cpus = (shape.cpus - (RESERVED_CPUS if shape.cpus >= 2 else 0.0)) * part
    return SlotLimits(memory_bytes=max(64 * MIB, int(memory // MIB) * MIB),
                      cpus=max(0.01, math.floor(cpus * 100) / 100),
                      tasks=shape.tasks_per_job or max(MIN_TASKS, int(shape.tasks * TASK_SHARE * part)))


def network_name(gpu_ids: tuple[int, ...] | None) -> str:
    """The slot's network: ``zen-net-<its first GPU>``, or ``zen-net`` when the job holds the whole VM."""
    return "zen-net" if not gpu_ids else f"zen-net-{min(gpu_ids)}"


def bridge_name(network: str) -> str:
    """The Linux bridge of ``network`` on the VM: ``docker-zen``, ``docker-zen-<index>``. NCCL leaves interfaces
    named ``docker*`` and ``lo`` out of those it picks by itself (``NCCL_SOCKET_IFNAME`` unset); docker's own
    name for a network's bridge, ``br-<id>``, it takes: a gang's node shares the VM's network, where NCCL
    before 2.28 also took the bridge's address (the same on every VM, each VM's own bridge) for its peers
    to connect to, which none of them can reach."""
    return BRIDGE_PREFIX + "zen" + network.removeprefix("zen-net")


def network_names(gpus: int, max_jobs: int) -> list[str]:
    """Every network a VM of ``gpus`` running ``max_jobs`` at once may put a job on."""
    return [network_name(None)] if max_jobs <= 1 else [network_name((index,)) for index in range(gpus)]


@dataclass(frozen=True)
class Sandbox:
    """How this VM's agent runs containers: the cluster's choices (``ClusterConfig.containers``) and the
    VM's shape (None: no memory, CPU or task limit; the agent always knows it, ``zen.agent.__main__``)."""

    run_as: str = NOBODY  # uid:gid, or "image" (the image's USER)
    network: Literal["job", "none"] = "job"
    shape: Shape | None = None
    read_only_root: bool = True


class ContainedJob(Protocol):
    """What of a job (``zen.agent.runner.JobSpec``) its confinement depends on."""

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def data_dirs(self) -> Mapping[str, str]: ...

    @property
    def gpu_ids(self) -> tuple[int, ...] | None: ...

    @property
    def gang_node(self) -> bool: ...


def container_options(spec: ContainedJob, sandbox: Sandbox | None = None) -> list[str]:
    """The ``docker run`` options that confine ``spec``'s container (the module's docstring), its data
    directories' mounts included (``ZEN_INPUT_DIR`` read-only, ``ZEN_OUTPUT_DIR`` and ``ZEN_SCRATCH_DIR``
    writable, each at the same path inside); ``sandbox`` None: the defaults, with no resource limits."""
    sandbox = sandbox or Sandbox()
    # No copy of the output in docker's own log: its default (json-file, never rotated) kept every byte a job
    # printed under /var/lib/docker, on the disk the jobs share, outside any share the disk quota measures (a
    # job printing 100 MB/s filled a 200 GiB disk within the hour). The agent reads the output as it comes
    # (``docker run`` attached), and ships it within its limits (zen.agent.output).
    options = ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--log-driver", "none"]
    if sandbox.read_only_root:
        options.append("--read-only")
    limits = slot_limits(sandbox.shape, spec.gpu_ids) if sandbox.shape is not None else None
    tmp = "rw,exec,nosuid,nodev,mode=1777"
    if limits is not None:
        tmp += f",size={limits.memory_bytes // 2 // MIB}m"
        # /dev/shm as large as /tmp (counted in the memory limit as it is written): docker's 64 MB failed
        # PyTorch's DataLoader workers ("bus error ... insufficient shared memory") and NCCL between a
        # job's GPUs, which pass their data through it.
        options += ["--memory", f"{limits.memory_bytes // MIB}m", "--memory-swap", f"{limits.memory_bytes // MIB}m",
                    "--cpus", f"{limits.cpus:g}", "--pids-limit", str(limits.tasks),
                    "--shm-size", f"{limits.memory_bytes // 2 // MIB}m"]
    options += ["--oom-score-adj", str(OOM_SCORE_ADJ), "--tmpfs", f"/tmp:{tmp}"]
    if sandbox.run_as != IMAGE_USER:
        options += ["--user", sandbox.run_as]
        # Its user's HOME is not writable (nobody's does not exist): the job's caches (Hugging Face's, pip's,
        # torch hub's) go to its ZEN_SCRATCH_DIR, on the VM's disk; /tmp is memory, counted in its memory limit
        # (a model of many GB there failed "No space left on device", or was killed for want of memory).
        if "HOME" not in spec.env:
            options += ["-e", f"HOME={spec.data_dirs.get('ZEN_SCRATCH_DIR', '/tmp')}"]
    # A gang's node (zen.core.gang) shares the VM's network: its peers reach rank 0's MASTER_PORT, and the
    # collectives their own ports, on the VM's address (the VM runs it alone: gangs need max_jobs_per_vm 1).
    # Zen's word (the attempt's gang), never the job's own env, decides it.
    options += ["--network", "none" if sandbox.network == "none" else "host" if spec.gang_node else network_name(spec.gpu_ids)]
    for key, path in spec.data_dirs.items():  # the same path inside the container
        if key == "ZEN_PREEMPTION_NOTICE":  # a file that may appear: its folder, read-only (zen.agent.checkpoint)
            path = os.path.dirname(path)
        options += ["-v", f"{path}:{path}:ro" if key in ("ZEN_INPUT_DIR", "ZEN_PREEMPTION_NOTICE") else f"{path}:{path}"]
    return options


FIRST_JOB_UID = 1000  # the VM keeps uids from here on from the metadata server on its own network (startup.sh)


def host_network_problem(sandbox: Sandbox | None) -> str | None:
    """Why a gang's node may not run here: its container shares the VM's network, where only uids of
    ``FIRST_JOB_UID`` or more are kept from the metadata server (the VM's credentials); None: it may (or
    the cluster's containers have no network)."""
    sandbox = sandbox or Sandbox()
    run_as = sandbox.run_as
    if sandbox.network != "none" and (run_as == IMAGE_USER or int(run_as.split(":")[0]) < FIRST_JOB_UID):
        return (f"a gang's node shares the VM's network, where its container as user {run_as!r} could reach the "
                f"metadata server (the VM's credentials): the cluster's containers.run_as must be a uid of "
                f"{FIRST_JOB_UID} or more (the default, 65534:65534) for gangs")
    return None


def ensure_networks(sandbox: Sandbox, docker: str = "docker") -> str | None:
    """Make the slots' networks that do not exist yet (``network: job``): None when they all exist, else
    why not (the agent then retires the VM: its jobs could not start). Never raises."""
    if sandbox.network == "none":
        return None
    shape = sandbox.shape or Shape(memory_bytes=0, cpus=1)
    for name in network_names(shape.gpus, shape.max_jobs):
        if _docker(docker, "network", "inspect", name) is None:
            continue
        failed = _docker(docker, "network", "create", *NETWORK_OPTIONS,
                         "--opt", f"com.docker.network.bridge.name={bridge_name(name)}", name)
        if failed is not None and _docker(docker, "network", "inspect", name) is not None:
            return f"cannot make the job network {name}: {failed}"
        log.info("job network made", extra={"network": name})
    return None


def _docker(docker: str, *args: str) -> str | None:
    """Run ``docker ARGS``: None when it worked, else why not."""
    try:
        done = subprocess.run([docker, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=DOCKER_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip()[-300:] or f"exit {done.returncode}")


# What docker prints when it, not the job, failed a ``docker run`` before the job's command ran (``docker_lines``): its
# daemon gone, its disk full, the GPUs' runtime broken or their libraries missing (127: "no such file"), the attempt's
# container name taken (a container of it left on the VM), the image's pull cut short by the network or the registry
# (``PULL_CUT``, ``PULL_STATUS``), and the registry's credential helper failing before the pull ("error getting
# credentials": the ``docker-credential-gcloud`` that ``startup.sh`` sets up could not get the VM's token from the
# metadata server, or is broken on the VM; the job's image plays no part in it). Each is this VM's or passing: it
# retires, and the attempt is requeued (another VM, maybe another region, pulls it again; a preemption's budget bounds
# the reruns, zen.core.lifecycle.FREE_PREEMPTIONS). An image that could not be pulled for good (not found, denied, a
# registry host that does not resolve), a command not in it, and what fails on every VM of a template alike (an option
# of Zen's its docker does not know, GPUs it cannot name, an image needing a newer driver: ``IMAGE_REQUIRES``) are the
# job's FAILED, with docker's line (``exit_note``):
# retiring VM after VM would not mend them.
# The registry's answer is in docker's words (``received unexpected HTTP status: 503 ...``) or, with the containerd
# image store, containerd's (``unexpected status from HEAD request to URL: 503 ...``, ``failed to fetch oauth token:
# unexpected status ...: 429 Too Many Requests``, no ``toomanyrequests`` on its line): ``PULL_STATUS`` reads either.
PULL_CUT = ("toomanyrequests", "TLS handshake timeout", "i/o timeout", "connection reset by peer",
            "Client.Timeout exceeded", "request canceled while waiting for connection", "context deadline exceeded",
            "Temporary failure in name resolution", "server misbehaving", "network is unreachable", "unexpected EOF",
            ": EOF", "filesystem layer verification failed")
# The programs under docker gone or refusing it (a package upgrade replacing them while the VM runs, a toolkit removed):
# the GPUs' runtime or its hook (``fork/exec /usr/bin/nvidia-container-runtime: no such file or directory``,
# ``exec: "nvidia-container-runtime-hook": executable file not found in $PATH``), containerd's shim or its socket,
# a runtime docker no longer knows (the daemon's own default-runtime: the agent names none). Their "no such file or
# directory" and "executable file not found" are what docker's CLI answers 127 by, the code of a command not in the
# image: the job's command never ran, nor did its image play any part.
RUNTIME_GONE = ("nvidia-container-runtime", "containerd-shim", "failed to start shim", "containerd.sock",
                "Unknown runtime specified", "unknown or invalid runtime name")
# The job's own command docker could not start (``exec: "<command>"``, a path said again after ``stat``): not docker's.
JOBS_COMMAND = re.compile(r'(?:container process|container init|process caused): exec: "([^"]+)"')
PULL_STATUS = re.compile(r"(?:unexpected status|HTTP status)[^\n]*?: (?:429|5\d\d)\b")
DOCKER_DOWN = ("Cannot connect to the Docker daemon", "Is the docker daemon running", "error during connect",
               "permission denied while trying to connect to the Docker daemon",  # the agent's, not the job's (126)
               "no space left on device", "could not select device driver", "nvidia-container-cli",
               "is already in use by container", "error getting credentials", *RUNTIME_GONE, *PULL_CUT)
# The GPUs' runtime refusing the image's own requirement (its ``NVIDIA_REQUIRE_CUDA``: "requirement error: unsatisfied
# condition: cuda>=12.8, please update your driver ..."): the image needs a newer driver than the VM's, which every VM
# of its template has alike. The job's FAILED, not the VM's, though its line names nvidia-container-cli.
IMAGE_REQUIRES = "nvidia-container-cli: requirement error"
# What docker's own exit codes say: the job's command never ran (a job's own 126 or 127 has no line of docker's).
DOCKER_EXITS = {125: "docker could not run the job's container", 126: "the job's command could not be run in its image",
                127: "the job's command was not found in its image"}


# The line the docker CLI ends its own error with: "See 'docker run --help'." (before docker 28), "Run 'docker run --help'
# for more information" (docker 28, after a blank line); a flag it refuses has its usage line ("Usage:  docker run
# [OPTIONS] ...") between the two. An error of the container's start (the GPUs' runtime failing its hook) has no help
# line, in any version: ``docker: <error>`` and the error's further lines, where the hook's own words are
# ("...stderr: Auto-detected mode as 'legacy'", then "nvidia-container-cli: ..."), then maybe the CLI's logged line.
HELP_LINES = ("See 'docker", "Run 'docker")
USAGE_LINE = "Usage:  docker "
GOES_ON = 2  # the lines after ``docker: ...`` read as its error's (the GPUs' hook: one), not the rest of the output
LOGGED = re.compile(r'^(?:time="[^"]*" )?level=\w+ |^[A-Z]{4}\[\d+\] ')  # a logrus line of the CLI's (``WAIT_LOST``)


def docker_lines(exit_code: int, tail: str) -> list[str]:
    """The lines of a ``docker run``'s output that are docker's own, where it may have chosen the exit code (125, 126,
    127): those saying ``docker: ...`` and the lines its error goes on with, and the one its CLI printed before its help
    line (``HELP_LINES``, its usage line between them skipped): the last line of an error of several is where the GPUs'
    runtime names its cause. None for another exit code. A job that exited 125 itself may print the same lines: the
    output cannot tell them apart, docker's state can (``zen.agent.container_end``), and such an end is not asked."""
    if exit_code not in DOCKER_EXITS:
        return []
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    said: list[str] = []
    going = 0  # lines left that may go on with docker's error (up to its help or logged line; a job's output after)
    for i, line in enumerate(lines):
        ends = line.startswith(HELP_LINES) or line.startswith(USAGE_LINE) or LOGGED.match(line) is not None
        going = GOES_ON + 1 if line.startswith("docker: ") else 0 if ends else going
        if going or not ends and _before_help(lines[i + 1:i + 3]):
            said.append(line)
        going = max(0, going - 1)
    return said


def _before_help(after: list[str]) -> bool:
    """Whether the lines ``after`` one are docker's help line, or its usage line and then its help line."""
    after = after[1:] if after[:1] and after[0].startswith(USAGE_LINE) else after[:1]
    return bool(after) and after[0].startswith(HELP_LINES)


# What the docker CLI logs (logrus's ``level=error msg="..."``, ``ERRO[0042] ...`` on a terminal; "Error", capitalized:
# the daemon's own answer was an error) when its wait for the container broke, its daemon gone while the job ran, before
# it exits 125, or the job's supervisor (``zen.agent.launch.LOST``: the CLI killed, docker unable to say whether the
# container runs): how the job ended is unknown, and it is the VM's (``docker_fault``), not the job's exit code.
WAIT_LOST = re.compile(r'(?:level=error msg="|^ERRO\[\d+\] |^zen watchdog: )[Ee]rror waiting for container: ([^"]*)')
LOST_WHILE_RUNNING = "error waiting for container: "


def docker_fault(container: str | None, exit_code: int, tail: str) -> str | None:
    """Docker's own line when it, not the job, failed the job's container (``DOCKER_DOWN``), or lost it while it ran
    (``WAIT_LOST``: the line's message, starting ``LOST_WHILE_RUNNING``; not after docker's own ``docker: ...`` error:
    the container's start failed, and an older CLI logs its wait cut short then, "context canceled");
    None: the job's exit (the image's own requirement the GPUs' runtime refused, ``IMAGE_REQUIRES``, included)."""
    if container is None:
        return None
    said = docker_lines(exit_code, tail)
    started = not any(line.startswith("docker: ") for line in said)  # else its start failed: no wait of a job was lost
    lost = (WAIT_LOST.search(line.strip()) for line in tail.splitlines()) if exit_code == 125 and started else iter(())
    if (match := next((match for match in lost if match), None)) is not None:
        return (LOST_WHILE_RUNNING + match.group(1))[:300]  # in one case, whichever the CLI's words
    if any(IMAGE_REQUIRES in line for line in said):  # the image's requirement, the VM's driver: the job's
        return None
    docker_words = [(line, line.replace(own[1], "") if (own := JOBS_COMMAND.search(line)) else line) for line in said]
    return next((line[:300] for line, words in docker_words  # (the job's own command taken out: ``JOBS_COMMAND``)
                 if any(p in words for p in DOCKER_DOWN) or PULL_STATUS.search(words)), None)


def lost_while_running(container: str | None, exit_code: int, tail: str) -> bool:
    """Whether docker lost ``container`` while its job ran (``WAIT_LOST``): the job's end is unknown, and the container
    may run on (containerd's shim keeps it through the daemon's crash), the job with it."""
    return (docker_fault(container, exit_code, tail) or "").startswith(LOST_WHILE_RUNNING)


def fault_reason(fault: str) -> str:
    """Why the VM retires, ``fault`` being ``docker_fault``'s line."""
    if fault.startswith(LOST_WHILE_RUNNING):
        return f"docker lost a job's container while it ran: {fault}"
    return f"docker could not start a job's container: {fault}"


# What a program prints when it wrote where its container may not: strerror(EROFS), in Python's words too.
READ_ONLY = "Read-only file system"


def exit_note(exit_code: int, tail: str, oom: bool, memory_bytes: int | None,
              read_only_root: bool = False, ran: bool = False) -> str | None:
    """What a container job's end means when the kernel (``oom``: ``zen.agent.container_end``) or docker (``docker_lines``;
    not when ``ran``: docker says the job's own process exited so, whatever its output says), not
    the job's program, chose its exit code, or when the job failed writing where its container is read-only
    (``READ_ONLY`` in its output, its root read-only: ``read_only_root``): the note before its output in its final
    report, ``memory_bytes`` its container's memory limit (None: none). None: the job's own exit code says it. The
    VM's faults (``docker_fault``) are the caller's to tell first."""
    if oom:
        how = f"{OUT_OF_MEMORY} (exit code 137)" if exit_code == 137 else (  # (the history's words: zen.core.retries)
            f"exit code {exit_code}, after one of its processes was {OUT_OF_MEMORY}")
        where = (f"the job's container reached its memory limit, {memory_bytes / GIB:.1f} GiB (its share of the VM's "
                 "memory; its files in /tmp and /dev/shm count), or the VM ran out of memory" if memory_bytes else
                 "the VM ran out of memory (the job's container has no memory limit)")
        return (f"zen: {how}: {where}; make the job use less (a smaller batch, fewer data loader workers), or give it "
                "more: more GPUs (a job has the share of its VM's memory its GPUs are of the VM's), or a cluster whose "
                "VMs have more memory")
    said = [] if ran else docker_lines(exit_code, tail)
    if not said:
        # The image's WORKDIR is on the read-only root, not writable: a script saving ./checkpoints, or Lightning's
        # ./lightning_logs, failed with "OSError: [Errno 30] Read-only file system" alone, Zen's choice unsaid.
        if exit_code != 0 and read_only_root and READ_ONLY in tail:
            return (f"zen: exit code {exit_code}, after the job wrote where its container is read-only: its root, its "
                    "working directory (the image's WORKDIR, where it starts) included, and ZEN_INPUT_DIR; it may "
                    "write /tmp and /dev/shm (memory, gone with the container), its ZEN_SCRATCH_DIR (its HOME unless "
                    "its env sets one: on the VM's disk, gone with the attempt) and, kept, its ZEN_OUTPUT_DIR and "
                    "ZEN_CHECKPOINT_DIR (a job given outputs or a checkpoint has them): point its outputs, "
                    "checkpoints and logs there")
        return None
    line = said[-1]  # an error of several lines names its cause last (``docker_lines``)
    line = line[line.find(IMAGE_REQUIRES):] if IMAGE_REQUIRES in line else line  # the version it needs, not cut off
    return f"zen: {DOCKER_EXITS[exit_code]} (exit code {exit_code}, docker's: the job's command never ran): {line[:300]}"
