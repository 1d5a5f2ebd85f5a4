"""The job's supervisor keeps the attempt's lease (``zen.agent.launch``): a job whose agent stops renewing
it is stopped by the supervisor, with everything it forked, whether or not the agent can run; one whose
lease is renewed runs to its end and its exit status is passed on. Real processes, no agent."""

from __future__ import annotations

import os
import signal
import sys
import time

from zen.agent.runner import JobSpec, RunningJob

SPAWNS = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)   # a job that does not stop when asked
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is no running job
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def _start(code: str, lease_s: float | None, grace_s: float = 0.5) -> RunningJob:
    spec = JobSpec(job_id="w", attempt=1, command=[sys.executable, "-c", code], stop_grace_s=grace_s)
    return RunningJob.start(spec, local=True, lease_s=lease_s)


def _wait_end(job: RunningJob, timeout_s: float) -> float:
    began = time.monotonic()
    while job.poll() is None and time.monotonic() - began < timeout_s:
        time.sleep(0.02)
    return time.monotonic() - began


def test_a_job_whose_lease_is_not_renewed_is_stopped_with_all_it_forked():
    job = _start(SPAWNS, lease_s=1.5, grace_s=0.5)
    lines = []
    while not lines and job.poll() is None:
        lines = job.output.recent_text().split()
        time.sleep(0.02)
    child = int(lines[0])
    took = _wait_end(job, 10)
    outcome = job.outcome()
    assert 1.4 < took < 4, took  # the lease (1.5 s) and the grace (0.5 s), not the job's 60 s
    assert job.fenced()
    assert outcome.exit_code == 137  # it ignored SIGTERM: SIGKILL, with the supervisor
    # What it forked (and left ignoring SIGTERM) went too: the group's SIGKILL reaches each process when it next
    # runs, which on a loaded machine may be a moment after the job's own end (it would sleep on for 60 s).
    gone_by = time.monotonic() + 2
    while _alive(child) and time.monotonic() < gone_by:
        time.sleep(0.02)
    assert not _alive(child)
    assert "zen watchdog: the agent has not renewed its lease" in outcome.tail


def test_a_renewed_lease_lets_the_job_end_by_itself_with_its_own_exit_code():
    job = _start("import sys, time; time.sleep(2); sys.exit(3)", lease_s=0.8)
    while job.poll() is None:
        job.renew(0.8)
        time.sleep(0.2)
    assert job.outcome().exit_code == 3
    assert not job.fenced()


def test_a_stop_reaches_the_job_and_its_signal_is_its_exit_code():
    job = _start("import time; time.sleep(60)", lease_s=60)
    time.sleep(0.3)
    assert job.stop(5) == 128 + signal.SIGTERM
    assert not job.fenced()


def test_a_job_started_without_a_lease_is_the_supervised_process_itself():
    job = _start("import os; print(os.getpid())", lease_s=None)
    assert int(job.outcome().tail.split()[0]) == job.pid  # exec'd in place: no process in between
