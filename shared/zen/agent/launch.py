"""Exec shim between the agent and a job: ``python -I launch.py AGENT_PID -- PROGRAM ARGS...``.

On Linux it asks the kernel to SIGKILL this process when the agent dies (``PR_SET_PDEATHSIG``,
which survives ``execve``), then becomes the job with ``execvp`` (same pid, no shell). So a job never
outlives an agent that was killed outright (OOM killer, SIGKILL after a stop timeout, the local
Compute stand-in deleting a VM): otherwise it would keep running unsupervised while the scheduler
reruns it elsewhere.

Caveat: the signal fires when the *thread* that started the child exits; the agent starts jobs from
its main thread, which lives as long as the agent does.

Run as a script (``-I``: no user site, ``PYTHON*`` variables ignored, so a job's own ``PYTHONPATH``
cannot break it); it imports only the standard library.
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: launch.py AGENT_PID -- PROGRAM [ARGS...]\n")
        return 2
    agent_pid, program = int(argv[0]), argv[2:]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            sys.stderr.write(f"zen: prctl(PR_SET_PDEATHSIG) failed: errno {ctypes.get_errno()}\n")
        if os.getppid() != agent_pid:  # the agent died before the signal was armed
            return 137
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
