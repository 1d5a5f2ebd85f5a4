"""A host-process job stopped at its task limit (zen.agent.tasklimit, ``RunningJob.over_tasks``) is retried under
its ``max_retries``: only ``max_runtime_s`` and the disk share are limits whose failure is not retried
(``Heartbeat.over_limit``), and the task limit was reported as ``max_runtime_s`` (taken from ``final is FAILED``,
which ``_supervise`` returns for the task limit too), its retries refused."""

from __future__ import annotations

import sys

from tests.agent.helpers import wait_for

FORKER = """
import subprocess, time
started, end = 0, time.monotonic() + 30
while started < 300 and time.monotonic() < end:
    try:
        subprocess.Popen(["sleep", "30"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started += 1
    except OSError:
        time.sleep(0.01)
time.sleep(30)
"""


def test_a_job_stopped_at_its_task_limit_keeps_its_retries(scheduler, agents):
    agents.start("vm-a", ZEN_AGENT_TASKS_PER_JOB="20")
    scheduler.submit("forker", [sys.executable, "-c", FORKER], max_retries=1, retry_backoff_s=0)

    job = wait_for(lambda: (j := scheduler.job("forker")) is not None and (j.attempt >= 2 or j.status.value == "FAILED")
                   and j, 60, 0.1, what="forker retried or FAILED")

    history = scheduler.history("forker")
    assert any("forked more than" in (reason or "") for _, _, reason in history) or "forked more than" in (
        job.message or ""), (job.status, job.message, history)
    # Not stopped at max_runtime_s (it has none) nor at its disk share: its retry is due, as before the change.
    assert (job.attempt, job.retries) == (2, 1), (job.status.value, job.message, history)
