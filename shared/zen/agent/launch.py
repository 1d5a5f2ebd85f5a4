"""The job's supervisor on the VM: ``python -I launch.py AGENT_PID [LEASE] [TASKS] -- PROGRAM ARGS...``.

Every job is started through it, in a session of its own (``zen.agent.runner``). It dies with the agent
(``PR_SET_PDEATHSIG``) and takes the job with it, and it keeps the attempt's lease (``LEASE`` = ``--lease
FD LEFT_S GRACE_S [CONTAINER DOCKER]``, renewed by the agent over a socket): when it runs out, it stops
the job as the agent's fence would (``zen.agent.fence``); a container docker did not kill then has the VM
powered off (``--fence-file PATH``, written: a root unit powers the VM off, ``zen.agent.leftover.fence_vm``). A
container's ``docker run`` that ended while docker says its container runs (the CLI killed or crashed, the job not)
is followed by ``docker attach`` to the container's own end (``_cli_ended``; docker unable to say after a CLI a
signal ended: docker's lost container, exit 125, ``LOST``). A host-process job (local mode only) is held to its
slot's task limit (``TASKS`` = ``--tasks N any|poll``; a container has docker's ``--pids-limit``):
``zen.agent.tasklimit``, loaded from its file (``-I`` puts no folder on the path). Standard library only.
Why, and the protocol: docs/reference/agent.md#the-fence, docs/reference/agent.md#a-jobs-processes,
docs/reference/agent.md#a-docker-cli-killed-while-its-container-runs
"""

import ctypes
import importlib.util
import math
import os
import select
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
LOOK_S = 1.0  # the longest wait between two looks at the clock (a VM resumed after a pause is fenced within it)
DOCKER_KILL_S = 5.0
KILLED_S = 5.0  # after ``docker kill``, how long the container's ``docker run`` may take to end before the VM is fenced
INSPECT_S = 5.0  # docker's answer on a container whose ``docker run`` (or ``docker attach``) ended
FOLLOWS = 5  # ``docker attach``es of one container at most, each once its CLI ended while docker says it runs
# How its supervisor says docker lost a job's container (``zen.agent.container.WAIT_LOST`` reads it, as the CLI's own).
LOST = "zen watchdog: error waiting for container: "
IGNORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# To the supervisor: end everything the job runs now, daemons that left its group included (the task limit's
# ``stop``), then the group, itself last. The agent sends it when a stop's grace is over (``RunningJob.stop``),
# and it is the supervisor's parent-death signal: an agent that dies leaves none of the job's processes.
KILL_ALL = signal.SIGUSR1


def _die_with_parent(parent: int, sig: int = signal.SIGKILL) -> bool:
    """Arm the parent-death signal; False when the parent is gone already (the signal would never come)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            sys.stderr.write(f"zen: prctl(PR_SET_PDEATHSIG) failed: errno {ctypes.get_errno()}\n")
    return os.getppid() == parent


def _exec(program: list[str]) -> int:
    try:
        os.execvp(program[0], program)
    except FileNotFoundError:
        sys.stderr.write(f"zen: command not found: {program[0]}\n")
        return 127
    except PermissionError:
        sys.stderr.write(f"zen: permission denied: {program[0]}\n")
        return 126
    except OSError as exc:
        sys.stderr.write(f"zen: cannot execute {program[0]}: {exc}\n")
        return 126
    return 0  # not reached: execvp replaced this process


def _status(wait_status: int) -> int:
    return 128 + os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else os.waitstatus_to_exitcode(wait_status)


class Lease:
    """The deadline the agent renews (CLOCK_MONOTONIC), read from its socket."""

    def __init__(self, fd: int | None, left_s: float):
        self.fd: int | None = fd
        self.renewed_at = time.monotonic()
        self.deadline = self.renewed_at + left_s
        self._partial = b""

    def read(self) -> None:
        if self.fd is None:  # the agent's end closed: nothing more comes
            return
        try:
            data = os.read(self.fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the agent closed its end (it is gone: the parent-death signal follows): keep the deadline
            self.fd = None
            return
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in reversed(lines):
            try:
                stamp, left = (float(part) for part in line.split())
            except ValueError:
                continue
            self.renewed_at, self.deadline = time.monotonic(), stamp + left
            return

    def tell(self, text: bytes) -> None:
        if self.fd is not None:
            try:
                os.write(self.fd, text)
            except OSError:
                pass


def _wait(child: int, pidfd: int | None, timeout_s: float, lease: Lease | None = None,
          look_s: float = LOOK_S) -> int | None:
    """Wait until the child ends (its wait status: ``_status``), the lease's socket has a line, or ``timeout_s``
    passed (None)."""
    watched = [fd for fd in (pidfd, lease.fd if lease else None) if fd is not None]
    try:
        ready, _, _ = select.select(watched, [], [], max(0.0, min(timeout_s, look_s if pidfd is not None else 0.05)))
    except InterruptedError:
        ready = []
    if lease is not None and lease.fd in ready:
        lease.read()
    pid, status = os.waitpid(child, os.WNOHANG)
    return status if pid == child else None


def _fence(child: int, pidfd: int | None, lease: Lease, grace_s: float, container: str | None, docker: str,
           limit=None, fence_file: str | None = None) -> int:
    lease.tell(b"fenced\n")
    silent_s = time.monotonic() - lease.renewed_at
    _say(f"zen watchdog: the agent has not renewed its lease on this attempt for {silent_s:.0f} s (it cannot run, or "
         "no report of it reaches Zen): stopping the job before Zen takes the attempt for lost (SIGTERM, SIGKILL "
         f"after {grace_s:g} s)")
    # The kill is due a grace after the lease's end, whenever this runs: resumed past both (a VM paused or
    # stalled that long), the job is killed at once, not given a grace (its SIGTERM's checkpoint) beside its rerun.
    deadline = lease.deadline + grace_s
    if time.monotonic() < deadline:
        os.killpg(0, signal.SIGTERM)  # this process ignores it
    status = None
    while status is None and time.monotonic() < deadline:
        status = _wait(child, pidfd, deadline - time.monotonic())
    killed = _docker_kill(docker, container)
    killed_by = time.monotonic() + (KILLED_S if killed == "killed" else 0.0)  # its ``docker run`` ends with it
    while container and status is None and time.monotonic() < killed_by:
        status = _wait(child, pidfd, killed_by - time.monotonic())
    # Docker did not kill it (a hung or failing daemon): the VM goes, at once where the kill got no answer in time
    # (an inspect would wait as long: the fence's margin is short). A ``docker run`` ending late alone (a slow
    # daemon, its output pipe full while the agent hangs) powers nothing off: docker says its container runs no more.
    if container and status is None and fence_file and (
            killed == "silent" or _sibling("removal").may_run(container, docker, DOCKER_KILL_S)):
        _fence_vm(fence_file, f"the container {container} of a job whose lease ran out is still running: docker did "
                              "not kill it, and Zen runs the job again elsewhere")
    if limit is not None:  # what left the group (a daemon), and its cgroup
        limit.stop(child)
        limit.close()
    os.killpg(0, signal.SIGKILL)  # whatever the job left in its group, and this process
    return 137  # not reached


def _docker_kill(docker: str, container: str | None) -> str | None:
    """A container job's container killed (bounded): the docker CLI forwards SIGTERM, but cannot forward SIGKILL.
    "killed", "refused" (docker answered, not with success: a failing daemon, or the container gone), "silent" (no
    answer within ``DOCKER_KILL_S``: a hung daemon); None: no container."""
    if not container:
        return None
    try:
        done = subprocess.run([docker, "kill", container], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=DOCKER_KILL_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return "silent"
    return "killed" if done.returncode == 0 else "refused"


# Docker's ``State.Status`` of a container it started: still running (``State.Running`` is true for all three), or
# ended. Any other ("created": never started, its exit code a 0 no job gave; "removing") says nothing of the job's end.
RUNS = ("running", "paused", "restarting")
ENDED = ("exited", "dead")


def container_state(docker: str, container: str) -> tuple[bool, int] | None:
    """Whether docker says ``container`` runs, and its exit code (bounded); None: docker cannot say (an error, no
    answer within ``INSPECT_S``, no such container, one it has not started: the CLI ended between its create and its
    start, or during a start that may yet run it)."""
    try:
        done = subprocess.run([docker, "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", container],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=INSPECT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    status, _, code = done.stdout.strip().partition(" ")
    if done.returncode != 0 or status not in RUNS + ENDED or not code.lstrip("-").isdigit():
        return None
    return status in RUNS, int(code)


def _cli_ended(docker: str, container: str, wait_status: int, follows: int) -> int | list[str]:
    """The container's ``docker run`` (or ``docker attach``) ended: the exit code to end with, or the program that
    follows the container on. Docker's daemon runs the container, not its CLI: a CLI killed (the kernel's OOM killer,
    a SIGKILL: it forwards only the signals it can catch) or crashed leaves it running, the job with it. Docker says
    it runs: followed (``docker attach``: its output, its end, the signals a stop sends forwarded), ``FOLLOWS`` times
    at most; it ended: its own exit code. Docker cannot say, after a CLI a signal ended: docker lost the container
    (125 and ``LOST``: the VM's fault, its end unknown; ``zen.agent.container.docker_fault``), and after an attach;
    after a ``docker run`` that exited, its exit code (docker's answer to its wait)."""
    signaled, code = os.WIFSIGNALED(wait_status), _status(wait_status)
    how = f"killed by signal {os.WTERMSIG(wait_status)}" if signaled else f"exit code {code}"
    state = container_state(docker, container)
    if state is not None and not state[0]:  # (a ``docker run``'s own exit kept: 125 when docker failed its start)
        return state[1] if signaled or follows else code
    if state is None and not signaled and not follows:
        return code
    if state is None or follows >= FOLLOWS:
        _say(LOST + (f"the docker CLI of the container {container} ended ({how}) and docker cannot say whether the "
                     "container still runs" if state is None else
                     f"the docker CLI of the container {container} ended {follows + 1} times while it ran ({how})"))
        return 125
    _say(f"zen watchdog: the docker CLI of the job's container {container} ended ({how}) while the container runs: "
         "following it (docker attach)")
    return [docker, "attach", "--no-stdin", container]


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _follow(program: list[str], lease: Lease, parent: int) -> int:
    """``program`` (``docker attach``) started as the job's child, dying with this process: its pid."""
    child = os.fork()
    if child == 0:
        for sig in (*IGNORED, KILL_ALL):
            signal.signal(sig, signal.SIG_DFL)
        if lease.fd is not None:
            os.close(lease.fd)
        if not _die_with_parent(parent):
            os._exit(137)
        os._exit(_exec(program))
    return child


def _fence_vm(path: str, reason: str) -> None:
    """Ask for the VM's power-off (``zen.agent.leftover.fence_vm``, which the agent's own fence uses)."""
    try:
        _sibling("fencefile").add_reason(path, reason)
    except OSError as exc:
        _say(f"zen watchdog: {reason}; cannot ask for this VM's power-off ({path}): {exc}")
    else:
        _say(f"zen watchdog: {reason}: this VM is powered off")


def _sibling(name: str):
    """``zen.agent.<name>`` (one of the standard library alone: ``tasklimit``, ``removal``), from its file beside this
    one (``-I``: no folder on the path)."""
    spec = importlib.util.spec_from_file_location(f"zen_{name}", os.path.join(os.path.dirname(__file__), f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _over_tasks(child: int, tasks, lease: Lease) -> int:
    """The job went over its task limit: killed at once, everything it runs; the agent told why."""
    reason = tasks.reason()
    tasks.stop(child)
    lease.tell(b"tasks " + reason.encode() + b"\n")
    _say(reason)
    os.waitpid(child, 0)
    return 137


def supervise(agent: int, lease: Lease, grace_s: float, container: str | None, docker: str,
              program: list[str], tasks: tuple[int, str] | None = None, fence_file: str | None = None) -> int:
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    if not _die_with_parent(agent, KILL_ALL):  # the agent died before the signal was armed (until its handler is
        return 137                            # set, below, KILL_ALL ends this process as SIGKILL would)
    me = os.getpid()
    limit = _sibling("tasklimit").TaskLimit(*tasks) if tasks else None
    go_read, go_write = os.pipe()  # the job's program runs once it is in its cgroup (if any)
    child = os.fork()
    if child == 0:
        for sig in IGNORED:
            signal.signal(sig, signal.SIG_DFL)
        if lease.fd is not None:
            os.close(lease.fd)
        os.close(go_write)
        os.read(go_read, 1)
        os.close(go_read)
        if not _die_with_parent(me):
            os._exit(137)
        os._exit(_exec(program))
    os.close(go_read)

    def kill_all(*_: object) -> None:  # the agent died: its job goes with it, a container's too
        if limit is not None:
            limit.stop(child)
        _docker_kill(docker, container)
        os.killpg(0, signal.SIGKILL)

    signal.signal(KILL_ALL, kill_all)
    if limit is not None:
        limit.enter(child)
    os.write(go_write, b"g")
    os.close(go_write)
    pidfd = _pidfd(child)
    follows = 0
    try:
        while True:
            timeout = lease.deadline - time.monotonic()
            if timeout <= 0:
                return _fence(child, pidfd, lease, grace_s, container, docker, limit, fence_file)
            if limit is not None:
                limit.reap(child)
                if limit.over():
                    return _over_tasks(child, limit, lease)
            status = _wait(child, pidfd, timeout, lease, LOOK_S if limit is None else limit.look_s)
            if status is not None and container is None:
                return _status(status)
            if status is not None and container is not None:
                ended = _cli_ended(docker, container, status, follows)
                if isinstance(ended, int):
                    return ended
                if pidfd is not None:
                    os.close(pidfd)
                child, follows = _follow(ended, lease, me), follows + 1
                pidfd = _pidfd(child)
    finally:
        if limit is not None:  # what the job left running (the agent kills its group too), and its cgroup
            limit.stop(child)
            limit.close()


def _pidfd(child: int) -> int | None:
    try:
        return os.pidfd_open(child)
    except (AttributeError, OSError):  # no pidfd (Linux before 5.3): look every 50 ms
        return None


def main(argv: list[str]) -> int:
    usage = ("usage: launch.py AGENT_PID [--lease FD LEFT_S GRACE_S [CONTAINER DOCKER]] [--tasks N any|poll] "
             "[--fence-file PATH] -- PROGRAM [ARGS...]\n")
    try:
        split = argv.index("--")
        head, program = argv[:split], argv[split + 1:]
        tasks = None
        if "--tasks" in head:
            at = head.index("--tasks")
            tasks = (int(head[at + 1]), head[at + 2])
            if tasks[0] < 1 or tasks[1] not in ("any", "poll"):
                raise ValueError
            del head[at:at + 3]
        fence_file = None
        if "--fence-file" in head:
            at = head.index("--fence-file")
            fence_file = head[at + 1]
            del head[at:at + 2]
        agent = int(head[0])
        lease, grace_s, container, docker = None, 0.0, None, "docker"
        if len(head) > 1:
            if head[1] != "--lease" or len(head) not in (5, 7):
                raise ValueError
            lease, grace_s = Lease(int(head[2]), float(head[3])), float(head[4])
            if len(head) == 7:
                container, docker = head[5], head[6]
        if not program:
            raise ValueError
    except (ValueError, IndexError):
        sys.stderr.write(usage)
        return 2
    if lease is None and tasks is None:  # nothing to keep: become the job (same pid, no process in between)
        if not _die_with_parent(agent):
            return 137
        return _exec(program)
    if lease is None:  # a task limit alone: a lease that never runs out
        lease = Lease(None, math.inf)
    elif lease.fd is not None:
        os.set_blocking(lease.fd, False)
    return supervise(agent, lease, grace_s, container, docker, program, tasks, fence_file)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
