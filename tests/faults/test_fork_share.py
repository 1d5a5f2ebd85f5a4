"""End to end, a fault: a job that forks without limit on a shared VM (issue 34). Through the whole local
stack (the Compute stand-in's agent, host processes: ``ZEN_AGENT_LOCAL=1``), one VM runs two jobs at once,
each held to 100 tasks (``ZEN_AGENT_TASKS_PER_JOB``; a container's ``--pids-limit`` on a real VM). One
starts ``sleep`` children as fast as it can: it is stopped FAILED with the reason, and not rerun; its
neighbour, which keeps starting processes of its own meanwhile, completes, and the VM takes the next job
in the forker's slot.

The forker is capped at 2,000 children (and a minute), so a limit that failed cannot endanger the machine
running the test. On code without the limit the forker ran on for its whole minute (the test's wait for
it ran out), its 2,000 children with it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.faults.stack import until
from tests.stack_support import decisions, home, job_view, refusal, running_stack, submit_as  # noqa: F401 - the fixture

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).parent / "fixtures"
FORKER = """
import subprocess, time
started, end = 0, time.monotonic() + 60
while started < 2000 and time.monotonic() < end:
    try:
        subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started += 1
    except OSError:
        time.sleep(0.01)  # refused: a fork bomb tries again
print("started", started, flush=True)
time.sleep(60)
"""
NEIGHBOUR = """
import os, subprocess, sys, time
end, runs = time.monotonic() + float(sys.argv[1]), 0
released = lambda: len(sys.argv) > 2 and os.path.exists(sys.argv[2])  # told to end sooner
while time.monotonic() < end and not released():  # processes of its own, all along: 10 a second, each waited for
    for _ in range(10):
        subprocess.run(["true"], check=True)
        runs += 1
    time.sleep(0.1)
print("ran", runs, flush=True)
"""


def _over(job_id: str) -> dict | None:
    job = job_view(job_id)
    return job if job.get("status") in ("SUCCEEDED", "FAILED", "CANCELLED") else None


def test_a_job_that_forks_without_limit_on_a_shared_vm_is_stopped_and_its_neighbour_completes(
        home, tmp_path, stack_forks):  # noqa: F811
    released = tmp_path / "released"  # the neighbour runs until it exists (15 s at most)
    with running_stack(home, (FIXTURES / "fork-share.yaml").read_text(),
                       (FIXTURES / "fork-share-scenario.yaml").read_text(), start=30000, tick_every_s=1.0, forks=stack_forks,
                       agent_env={"ZEN_AGENT_TASKS_PER_JOB": "100"}) as stack:
        def submit(job_id: str, code: str, *args: str) -> None:
            submit_as(stack, "alice", {"job_id": job_id, "user_id": "alice", "gpu_type": "nvidia-l4",
                                       "gpu_count": 1, "command": [sys.executable, "-c", code, *args]})

        submit("neighbour", NEIGHBOUR, "15", str(released))
        assert until(lambda: job_view("neighbour").get("status") == "RUNNING", 120), (
            job_view("neighbour") or refusal("neighbour"), decisions()[-10:])
        submit("forker", FORKER)
        forker = until(lambda: _over("forker"), 30)
        running = job_view("neighbour")
        # The next job in the forker's slot while the neighbour still runs: once both had ended, the idle VM
        # could go before a loaded machine's `zen submit` arrived, and the next job ran on a new VM.
        submit("next", NEIGHBOUR, "0")
        after = until(lambda: _over("next"), 30)
        released.touch()
        neighbour = until(lambda: _over("neighbour"), 30)
        scaling = decisions()  # why the VM went, if the next job ran on another
    assert forker and forker["status"] == "FAILED" and forker["attempt"] == 1, forker  # not rerun
    assert forker["message"].startswith("zen: stopped: the job forked more than 100 processes (its limit: 100 "
                                        "processes and threads at once"), forker["message"]
    assert "run it alone on a VM (a cluster with max_jobs_per_vm 1)" in forker["message"]
    assert running["status"] == "RUNNING"  # the neighbour ran beside it ...
    assert neighbour and neighbour["status"] == "SUCCEEDED", neighbour  # ... and completed
    # The VM works on.
    assert forker["vm"] == neighbour["vm"] == after["vm"] and after["status"] == "SUCCEEDED", (after, scaling)
