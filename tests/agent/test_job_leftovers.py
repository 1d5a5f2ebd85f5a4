"""A host-process job's processes end with its attempt, whatever it did to outlive it: a daemon in a session of
its own when a stop's grace is over, and its children when its agent dies (real processes, ``launch.KILL_ALL``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tests.agent.test_tasklimit import _alive
from tests.waiting import wait_for
from zen.agent.container import Sandbox, Shape
from zen.agent.runner import JobSpec, RunningJob

# Ignores SIGTERM; double-forks a daemon into a session of its own (pid written to argv[1]); sleeps.
DAEMONIZES = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
middle = os.fork()
if middle == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
    os._exit(0)
os.waitpid(middle, 0)
print("ready", flush=True)
time.sleep(120)
"""

# Forks a child in its own process group (pid written to argv[1]), as any job may; sleeps.
FORKS = """
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "120"])
with open(sys.argv[1], "w") as f:
    f.write(str(child.pid))
print("ready", flush=True)
time.sleep(120)
"""

# A stand-in for the agent: starts the job as the agent does (a lease, a task limit), then waits.
AGENT = """
import sys, time
sys.path.insert(0, sys.argv[1])
from zen.agent.container import Sandbox, Shape
from zen.agent.runner import JobSpec, RunningJob
shape = Shape(memory_bytes=8 << 30, cpus=4, tasks_per_job=200)
spec = JobSpec(job_id="j", attempt=1, stop_grace_s=0.5, sandbox=Sandbox(shape=shape),
               command=[sys.executable, "-c", sys.argv[2], sys.argv[3]])
job = RunningJob.start(spec, local=True, lease_s=60)
print(job.pid, flush=True)
time.sleep(120)
"""


@contextmanager
def _killed_at_the_end(pid: int) -> Iterator[int]:
    """``pid``, killed after the test if it is still there (a failure leaves no process behind)."""
    try:
        yield pid
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _wait_file(path: Path, timeout_s: float = 10.0) -> int:
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def test_a_stopped_job_that_ignores_sigterm_leaves_no_daemon(tmp_path):
    """The job ignores SIGTERM; at the grace's end the group's SIGKILL ended the supervisor before it could
    kill what left the group (its task limit's ``stop``), and the daemon ran on."""
    record = tmp_path / "daemon"
    shape = Shape(memory_bytes=8 << 30, cpus=4, tasks_per_job=200)
    spec = JobSpec(job_id="d", attempt=1, stop_grace_s=0.5, sandbox=Sandbox(shape=shape),
                   command=[sys.executable, "-c", DAEMONIZES, str(record)])
    job = RunningJob.start(spec, local=True, lease_s=60)
    with _killed_at_the_end(_wait_file(record)) as daemon:
        job.stop(0.5)
        job.outcome()
        time.sleep(0.5)
        assert not _alive(daemon), "the job's daemon survived the STOP"


def test_a_job_whose_agent_dies_leaves_no_child(tmp_path):
    """The agent dies (SIGKILL, the OOM killer): the supervisor's parent-death signal was SIGKILL, so it died
    without ending what the job had forked, which ran on past the attempt's lease."""
    record = tmp_path / "child"
    shared = str(Path(__file__).resolve().parents[2] / "shared")
    agent = subprocess.Popen([sys.executable, "-c", AGENT, shared, FORKS, str(record)],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    with _killed_at_the_end(_wait_file(record)) as child:
        agent.kill()
        agent.wait()
        # The supervisor kills it once it runs its parent-death signal's handler: on a loaded machine, not within a
        # fixed second. Its lease (60 s) is what it must not outlive.
        wait_for(lambda: not _alive(child), 20, what="the job's child gone with its agent (it must not outlive its lease)")
