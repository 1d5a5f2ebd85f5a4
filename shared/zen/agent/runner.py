"""Runs one job: builds its argv (a plain process in local mode only, else ``docker run ... -- IMAGE
CMD``, confined by ``zen.agent.container``), starts it through its supervisor (``launch.py``) in a
process group of its own, hands its stdout and stderr to ``zen.agent.output``, stops it (SIGTERM, a
grace, ``docker kill``, SIGKILL), reports its exit code (``128 + N`` for signal N) and, for a container job, what
the kernel or docker made of it (``zen.agent.container.exit_note``), and has its container removed (``zen.agent.removal``).
Why: docs/reference/agent.md#a-jobs-container
"""

from __future__ import annotations

import errno
import hashlib
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from zen.agent.argsize import too_large
from zen.agent.container import Sandbox, container_options, exit_note, host_network_problem, slot_limits
from zen.agent.container_end import container_end
from zen.agent.output import AttemptOutput, OutputLimits, StreamCapture
from zen.agent.removal import remove_container
from zen.core.secrets import reserved_secret

log = logging.getLogger("zen.agent.runner")
LAUNCH = Path(__file__).with_name("launch.py")
_CONTAINER_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")
NAME_ID_CHARS = 64  # of the job id, in an attempt's name (the hash keeps longer ids apart)


# The control plane's own secrets, which an agent's environment may hold on a developer machine (the
# local stack's): never passed on to a job, whose code is not Zen's.
NOT_INHERITED = frozenset({"ZEN_DATABASE_URL", "ZEN_CLOUDSQL_INSTANCE", "ZEN_PROOF_SECRET"})


class CannotRun(Exception):
    """The job cannot be started here (e.g. an image-only job in local mode)."""


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    attempt: int
    command: list[str] | None = None
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    max_runtime_s: float | None = None  # what staging left of the start's max_runtime_s
    stop_grace_s: float | None = None
    data_dirs: dict[str, str] = field(default_factory=dict)  # ZEN_INPUT_DIR, ZEN_OUTPUT_DIR, ZEN_SCRATCH_DIR (staging)
    gpu_ids: tuple[int, ...] | None = None  # its GPUs on a VM that runs several jobs (zen.agent.slots); None: all
    sandbox: Sandbox | None = None  # how its container is confined (zen.agent.container); None: the defaults
    # Its secrets' values (zen.agent.secrets): in its environment, never in an argv or a repr.
    secret_env: dict[str, str] = field(default_factory=dict, repr=False)
    gang_node: bool = False  # a node of a gang (Zen's CONFIRM said so): its container shares the VM's network
    pull_always: bool = False  # ``docker run --pull always``: its image's re-pull failed (zen.agent.imagepull.pull)

    def job_env(self, *, container: bool = False) -> dict[str, str]:
        """What the job sees besides its own ``env``: which job and attempt it is, how long it has
        between SIGTERM and SIGKILL when stopped or preempted (time to checkpoint), and where its
        inputs are and its outputs go (these win over its ``env`` and secrets: the agent uploads that
        directory). A container's secrets are not here: its docker CLI passes them by name (``docker_argv``)."""
        own = {"ZEN_JOB_ID": self.job_id, "ZEN_JOB_ATTEMPT": str(self.attempt)}
        if self.stop_grace_s is not None:
            own["ZEN_STOP_GRACE_S"] = f"{self.stop_grace_s:g}"
        env = {**own, **self.env, **self.secret_env, **self.data_dirs, **self.gpu_env(container=container)}
        for name in self.container_secrets() if container else ():
            del env[name]
        return env

    def container_secrets(self) -> dict[str, str]:
        """The secrets a container is given by name: ``-e NAME`` takes the value from the docker CLI's own
        environment, so no value is on a command line (``ps``, /proc/PID/cmdline). Like ``env``, less the
        variables that win over it."""
        wins = {**self.data_dirs, **self.gpu_env(container=True)}
        return {name: value for name, value in self.secret_env.items() if name not in wins}

    def gpu_env(self, *, container: bool) -> dict[str, str]:
        """Which GPUs are the job's, when it shares its VM (these win over its ``env``): ``ZEN_GPU_IDS``,
        the VM's device indices, and for a plain process ``CUDA_VISIBLE_DEVICES`` too (a container is
        given only those devices, ``--gpus``, and sees them renumbered from 0: a ``CUDA_VISIBLE_DEVICES``
        of its own picks among them), in nvidia-smi's bus order (``CUDA_DEVICE_ORDER``: CUDA's own, fastest first)."""
        if self.gpu_ids is None:
            return {}
        own = {"ZEN_GPU_IDS": (ids := ",".join(str(index) for index in self.gpu_ids))}
        return own if container else {**own, "CUDA_VISIBLE_DEVICES": ids, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


@dataclass(frozen=True)
class Launch:
    """How to start a job: the argv, the extra environment of the process, the container if any."""

    argv: list[str]
    env: dict[str, str] = field(repr=False)  # may hold the job's secrets
    container: str | None = None


def attempt_name(job_id: str, attempt: int) -> str:
    """The attempt's own name on this VM (its container's, its work directory's): ``<job>-<hash>-<attempt>``,
    the job id with what docker refuses in names (``:``) as ``-`` and cut to ``NAME_ID_CHARS``, then the
    first 12 hex digits of the SHA-256 of the real id. The hash keeps it one-to-one: ``exp:1`` and
    ``exp-1`` (or two ids alike in their first 64 characters) once shared a name, and on a VM running
    several jobs one wiped the other's data and ``docker run --name`` refused the second."""
    digest = hashlib.sha256(job_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{_CONTAINER_UNSAFE.sub('-', job_id)[:NAME_ID_CHARS]}-{digest}-{attempt}"


def container_name(job_id: str, attempt: int) -> str:
    """``zen-<attempt_name>``: only characters docker accepts, one name per attempt."""
    return f"zen-{attempt_name(job_id, attempt)}"


def docker_argv(spec: JobSpec, docker: str = "docker") -> list[str]:
    """``docker run`` with the job's options, then ``--`` and the image: whatever the image is, docker
    reads it as the image (and refuses one that is not a reference), never as an option such as
    ``--privileged`` (submissions are checked too: ``zen.core.images``; this holds for any start message)."""
    if not spec.image:
        raise CannotRun("no image to run")
    if spec.image.startswith("-"):
        raise CannotRun(f"image {spec.image[:100]!r} is not an image reference (it starts with '-')")
    gpus = "all" if spec.gpu_ids is None else '"device=%s"' % ",".join(str(index) for index in spec.gpu_ids)
    # No --rm: the agent removes the container (zen.agent.removal), once docker said whether it ran out of memory.
    argv = [docker, "run", "--gpus", gpus, "--name", container_name(spec.job_id, spec.attempt)]
    argv += (["--pull", "always"] if spec.pull_always else []) + container_options(spec, spec.sandbox)  # user, limits...
    for key, value in spec.job_env(container=True).items():
        argv += ["-e", f"{key}={value}"]
    for key in spec.container_secrets():
        argv += ["-e", key]  # the value: in the docker CLI's environment (plan_launch)
    return argv + ["--", spec.image] + list(spec.command or [])


def plan_launch(spec: JobSpec, *, local: bool, docker: str = "docker") -> Launch:
    """Choose how to run ``spec``: a container when it has an image and we are not local; a plain
    process locally (images ignored: the local stack and the tests have no docker).

    On a VM a job without an image is refused: as a plain process it would run as the agent's user
    beside the agent (in the docker group: root's equal), with the VM's credentials (the metadata server gives any process on the host the agent's
    service-account token: forged heartbeats, other clusters' start messages). A container cannot
    reach the metadata server (``startup.sh`` rejects its traffic there), so on a VM jobs run only
    in containers."""
    if spec.image and not local:
        if spec.gang_node and (problem := host_network_problem(spec.sandbox)):
            raise CannotRun(problem)
        if unsafe := sorted(name for name in spec.secret_env if reserved_secret(name)):  # a message from before the rule
            raise CannotRun(f"secrets named {', '.join(unsafe)} would be set for the programs that start the container "
                            f"(zen.core.secrets.reserved_names): not run")
        # By its full path, found on the agent's PATH: the launcher runs with the secrets in its environment.
        docker = shutil.which(docker) or docker
        return Launch(docker_argv(spec, docker), spec.container_secrets(), container_name(spec.job_id, spec.attempt))
    if not local:
        raise CannotRun("the job has no image: on a VM jobs run only in a container (as a plain process a job "
                        "would run as the agent, root's equal, with the VM's credentials); submit it with an image (--image)")
    if not spec.command:
        raise CannotRun(f"image {spec.image} given without a command, and local mode runs no containers"
                        if spec.image else "no command to run")
    return Launch(list(spec.command), spec.job_env())


def normalized_exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    tail: str
    note: str | None = None  # what the kernel or docker made of a container's end (container.exit_note)
    ran: bool = False  # docker says the container's own process chose its exit code (container_end): its lines are its own


class RunningJob:
    """One started job. ``poll`` / ``stop`` / ``outcome``; not thread-safe (the agent loop owns it)."""

    def __init__(self, spec: JobSpec, launch: Launch, process: subprocess.Popen, output: AttemptOutput,
                 captures: list[StreamCapture], docker: str = "docker", lease: socket.socket | None = None):
        self.spec = spec
        self.launch = launch
        self.process = process
        self.output = output
        self.started = time.monotonic()
        self._captures = captures
        self._docker = docker
        self._outcome: Outcome | None = None
        self.container_gone: bool | None = None  # its container's removal (None: not tried, or no container)
        self._stop_deadline = math.inf  # a stop under a deadline (stop within_s): when it and outcome() must be done
        self._stopped = False  # stop() ran: the job did not end on its own (no docker inspect of its end)
        self._lease = lease  # the agent's end of the supervisor's lease socket (None: no watchdog)
        self.supervised = False  # launch.py supervises the job (a lease or a task limit to keep): ``_kill_all``
        self._heard = b""  # what the supervisor said on it: "fenced", "tasks <reason>" (zen.agent.launch)

    def renew(self, left_s: float) -> None:
        """Tell the supervisor the attempt's lease has ``left_s`` seconds left from now. Never blocks: a
        supervisor that reads nothing (it has ended) loses nothing by a renewal not written."""
        if self._lease is None:
            return
        try:
            self._lease.send(f"{time.monotonic():.6f} {left_s:.6f}\n".encode())
        except OSError:
            pass

    def fenced(self) -> bool:
        """Whether the supervisor stopped the job because its lease ran out (the agent could not renew it)."""
        return b"fenced" in self._hear().split(b"\n")

    def over_tasks(self) -> str | None:
        """Why the supervisor stopped a host-process job over its task limit (``zen.agent.tasklimit``), or None."""
        for line in self._hear().split(b"\n"):
            if line.startswith(b"tasks "):
                return line[6:].decode(errors="replace")
        return None

    def _hear(self) -> bytes:
        while self._lease is not None:
            try:
                data = self._lease.recv(4096)
            except OSError:
                break
            if not data:
                break
            self._heard += data
        return self._heard

    @classmethod
    def start(cls, spec: JobSpec, *, local: bool, tail_bytes: int = 4096, docker: str = "docker",
              output: AttemptOutput | None = None, limits: OutputLimits = OutputLimits(),
              base_env: Mapping[str, str] | None = None, lease_s: float | None = None,
              fence_file: str | None = None) -> "RunningJob":
        """Start the job; raises ``CannotRun`` if it cannot be (the caller reports it as FAILED).

        ``lease_s``: seconds left on the attempt's lease (``zen.agent.fence``). Given, the job's supervisor
        (``launch.py``) keeps the lease as well, and stops the job when the agent renews it (``renew``)
        no more: the job cannot outlive its lease whether or not the agent can run. ``fence_file``: where the
        supervisor asks for the VM's power-off when docker did not kill the container then
        (``zen.agent.leftover.fence_vm``); None: it does not.

        ``output`` ships the lines (the agent passes one with its sink); without it only the last
        ``tail_bytes`` are kept, for the outcome.
        """
        launch = plan_launch(spec, local=local, docker=docker)
        inherited = os.environ if base_env is None else base_env
        env = {**{k: v for k, v in inherited.items() if k not in NOT_INHERITED}, **launch.env}
        watchdog: list[str] = []
        ours = theirs = None
        if lease_s is not None:  # the supervisor keeps the attempt's lease too (launch.py, zen.agent.fence)
            ours, theirs = socket.socketpair()
            ours.setblocking(False)
            watchdog = ["--lease", str(theirs.fileno()), repr(float(lease_s)), repr(float(spec.stop_grace_s or 0.0))]
            if launch.container:
                watchdog += [launch.container, docker] + (["--fence-file", fence_file] if fence_file else [])
        if not launch.container and spec.sandbox is not None and spec.sandbox.shape is not None:
            # A host process's share of the VM's tasks, as its container's --pids-limit (zen.agent.tasklimit).
            watchdog += ["--tasks", str(slot_limits(spec.sandbox.shape, spec.gpu_ids).tasks), "any"]
        argv = [sys.executable, "-I", str(LAUNCH), str(os.getpid()), *watchdog, "--", *launch.argv]
        output = output or AttemptOutput(spec.job_id, spec.attempt, "", None, limits, tail_bytes)
        try:
            process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, start_new_session=True,
                                       pass_fds=(theirs.fileno(),) if theirs else ())
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the command, an env name with '='
            if ours is not None:
                ours.close()
            big = isinstance(exc, OSError) and exc.errno == errno.E2BIG  # in the job's terms, never a value
            raise CannotRun(too_large(argv, env, command=spec.command, job_env=spec.env, secrets=spec.secret_env)
                            if big else f"cannot start the job: {exc}") from None
        finally:
            if theirs is not None:
                theirs.close()
        captures = [StreamCapture(process.stdout, "stdout", output, limits),
                    StreamCapture(process.stderr, "stderr", output, limits)]
        job = cls(spec, launch, process, output, captures, docker, ours)
        job.supervised = bool(watchdog)  # else launch.py became the job itself: no supervisor to tell KILL_ALL
        return job

    @property
    def pid(self) -> int:
        return self.process.pid

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def poll(self) -> int | None:
        """The normalized exit code once the job's main process has ended, else ``None``."""
        code = self.process.poll()
        return None if code is None else normalized_exit_code(code)

    def over_time(self) -> bool:
        limit = self.spec.max_runtime_s
        return limit is not None and self.elapsed_s() >= limit

    def stop(self, grace_s: float, within_s: float = math.inf) -> int:
        """SIGTERM the group, wait ``grace_s``, then kill it; a container is then removed (``remove_container``).
        ``within_s``: all of it, the kill and the removal included (a shutdown's deadline: a hung docker
        took the agent past systemd's, and its PREEMPTED report with it); what is not done by then is
        left (a container: the next agent removes it first thing). Returns the normalized exit code."""
        deadline = time.monotonic() + within_s
        self._stop_deadline, self._stopped = deadline, True  # outcome() keeps to it too (a shutdown's: the report must go)
        if self.process.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.process.wait(timeout=min(grace_s, max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                log.warning("job ignored SIGTERM for %gs; killing it", grace_s,
                            extra={"job_id": self.spec.job_id, "attempt": self.spec.attempt})
                if self.launch.container:
                    self._docker_kill(self.launch.container, min(15.0, max(1.0, deadline - time.monotonic())))
                self._kill_all()
                self._signal_group(signal.SIGKILL)
                try:
                    self.process.wait(timeout=min(30.0, max(1.0, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:  # the docker CLI, stuck on a hung daemon
                    log.error("job still not ended after SIGKILL", extra={"job_id": self.spec.job_id})
        self.remove_container(deadline - time.monotonic())
        return normalized_exit_code(self.process.returncode if self.process.returncode is not None else -9)

    def outcome(self) -> Outcome:
        """Wait for the end, kill leftovers in the group (and the container), and return the exit code and
        output tail."""
        if self._outcome is None:
            left = self._stop_deadline - time.monotonic()  # inf: no stop under a deadline
            try:  # after a stop under a shutdown's deadline, its leftovers too (a hung docker: removed at next boot)
                code = normalized_exit_code(self.process.wait(timeout=None if math.isinf(left) else max(0.1, left)))
            except subprocess.TimeoutExpired:  # the docker CLI, stuck on a hung daemon: taken for killed
                code = normalized_exit_code(-9)
            self._signal_group(signal.SIGKILL)  # background children the job left behind
            oom, ran = container_end(self.launch.container, code, self._stopped, self._docker)  # (before its removal)
            self.remove_container(self._stop_deadline - time.monotonic())
            for capture in self._captures:
                capture.finish()
            self.fenced()
            if self._lease is not None:
                self._lease.close()
                self._lease = None
            tail, box = self.output.recent_text(), self.spec.sandbox or Sandbox()  # (None: the defaults, read-only)
            memory = slot_limits(box.shape, self.spec.gpu_ids).memory_bytes if box.shape else None
            note = exit_note(code, tail, oom, memory, box.read_only_root, ran) if self.launch.container else None
            self._outcome = Outcome(code, tail, note, ran)
        return self._outcome

    def _kill_all(self, wait_s: float = 3.0) -> None:
        """The supervisor ends what the job runs, daemons that left its group included (``launch.KILL_ALL``);
        the group's SIGKILL would end the supervisor first, and with it the only one who knows them."""
        if not self.supervised:
            return
        try:
            os.kill(self.process.pid, signal.SIGUSR1)  # launch.KILL_ALL
            self.process.wait(timeout=wait_s)
        except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
            pass

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _docker_kill(self, container: str, timeout_s: float = 15.0) -> None:
        """SIGKILL to the container; whether it worked or not, ``remove_container`` follows."""
        try:
            subprocess.run([self._docker, "kill", container], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("docker kill failed", extra={"job_id": self.spec.job_id, "error": str(exc)})

    def remove_container(self, budget_s: float = math.inf) -> None:
        if self.launch.container is None or self.container_gone or budget_s <= 0:
            return
        self.container_gone = remove_container(self.launch.container, self._docker, budget_s=budget_s)


def remove_image(image: str, docker: str = "docker") -> bool:
    """``docker image rm IMAGE`` (no force: an image a container still uses stays). Best effort: True
    when docker removed it; a failure is logged, never raised (the next job does not depend on it)."""
    try:
        done = subprocess.run([docker, "image", "rm", image], capture_output=True, text=True, timeout=120,
                              check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("could not remove an image", extra={"image": image, "error": str(exc)})
        return False
    if done.returncode != 0:
        log.warning("docker kept an image", extra={"image": image, "error": done.stderr.strip()[-300:]})
    return done.returncode == 0
