"""The job's supervisor on the VM: ``python -I launch.py AGENT_PID [LEASE] -- PROGRAM ARGS...``.

Every job is started through it, in a session of its own (``zen.agent.runner``). It dies with the agent
(``PR_SET_PDEATHSIG``) and takes the job with it, and it keeps the attempt's lease (``LEASE`` = ``--lease
FD LEFT_S GRACE_S [CONTAINER DOCKER]``, renewed by the agent over a socket): when it runs out, it stops
the job as the agent's fence would (``zen.agent.fence``). Standard library only.
Why, and the protocol: docs/reference/agent.md#the-fence
"""

import ctypes
import os
import select
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
LOOK_S = 1.0  # the longest wait between two looks at the clock (a VM resumed after a pause is fenced within it)
DOCKER_KILL_S = 5.0
IGNORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _die_with_parent(parent: int) -> bool:
    """Arm the parent-death signal; False when the parent is gone already (the signal would never come)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
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

    def __init__(self, fd: int, left_s: float):
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


def _wait(child: int, pidfd: int | None, timeout_s: float, lease: Lease | None = None) -> int | None:
    """Wait until the child ends (its status), the lease's socket has a line, or ``timeout_s`` passed (None)."""
    watched = [fd for fd in (pidfd, lease.fd if lease else None) if fd is not None]
    try:
        ready, _, _ = select.select(watched, [], [], max(0.0, min(timeout_s, LOOK_S if pidfd is not None else 0.05)))
    except InterruptedError:
        ready = []
    if lease is not None and lease.fd in ready:
        lease.read()
    pid, status = os.waitpid(child, os.WNOHANG)
    return _status(status) if pid == child else None


def _fence(child: int, pidfd: int | None, lease: Lease, grace_s: float, container: str | None, docker: str) -> int:
    lease.tell(b"fenced\n")
    silent_s = time.monotonic() - lease.renewed_at
    sys.stderr.write(f"zen watchdog: the agent has not renewed its lease on this attempt for {silent_s:.0f} s "
                     "(it cannot run, or no report of it reaches Zen): stopping the job before Zen takes the "
                     f"attempt for lost (SIGTERM, SIGKILL after {grace_s:g} s)\n")
    sys.stderr.flush()
    os.killpg(0, signal.SIGTERM)  # this process ignores it
    deadline = time.monotonic() + grace_s
    status = None
    while status is None and time.monotonic() < deadline:
        status = _wait(child, pidfd, deadline - time.monotonic())
    if container:  # the docker CLI forwards SIGTERM, but cannot forward SIGKILL
        try:
            subprocess.run([docker, "kill", container], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=DOCKER_KILL_S, check=False)
        except (OSError, subprocess.SubprocessError):
            pass
    os.killpg(0, signal.SIGKILL)  # whatever the job left in its group, and this process
    return 137  # not reached


def supervise(agent: int, lease: Lease, grace_s: float, container: str | None, docker: str,
              program: list[str]) -> int:
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    if not _die_with_parent(agent):  # the agent died before the signal was armed
        return 137
    me = os.getpid()
    child = os.fork()
    if child == 0:
        for sig in IGNORED:
            signal.signal(sig, signal.SIG_DFL)
        if lease.fd is not None:
            os.close(lease.fd)
        if not _die_with_parent(me):
            os._exit(137)
        os._exit(_exec(program))
    try:
        pidfd = os.pidfd_open(child)
    except (AttributeError, OSError):  # no pidfd (Linux before 5.3): look every 50 ms
        pidfd = None
    while True:
        timeout = lease.deadline - time.monotonic()
        if timeout <= 0:
            return _fence(child, pidfd, lease, grace_s, container, docker)
        status = _wait(child, pidfd, timeout, lease)
        if status is not None:
            return status


def main(argv: list[str]) -> int:
    usage = "usage: launch.py AGENT_PID [--lease FD LEFT_S GRACE_S [CONTAINER DOCKER]] -- PROGRAM [ARGS...]\n"
    try:
        split = argv.index("--")
        head, program = argv[:split], argv[split + 1:]
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
    if lease is None:  # no lease to keep: become the job (same pid, no process in between)
        if not _die_with_parent(agent):
            return 137
        return _exec(program)
    assert lease.fd is not None  # made from FD just now: only a read of a closed socket clears it
    os.set_blocking(lease.fd, False)
    return supervise(agent, lease, grace_s, container, docker, program)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
