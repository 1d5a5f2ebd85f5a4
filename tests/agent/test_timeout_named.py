"""A job the agent stopped at its max_runtime_s, with real agents against the real scheduler (fixtures of
tests/agent/conftest.py): its history and ``zen explain`` say so (they said "exit code 143", and "FAILED - ended:
exit code 0" for a job that saved its work on SIGTERM and exited cleanly)."""
from __future__ import annotations

import sys

from tests.agent.helpers import job_command
from zen.cli.queues import explain_line, local_time

TRAP_EXIT_0 = ("import signal, sys, time\n"
               "signal.signal(signal.SIGTERM, lambda *a: (print('checkpointed on SIGTERM', flush=True), sys.exit(0)))\n"
               "print('training', flush=True)\n"
               "time.sleep(120)\n")


def _explain(scheduler, job):
    with scheduler.db.transaction() as session:
        return explain_line(session, scheduler.config, job, local_time)


def test_timeout_is_named_by_explain_and_history(scheduler, agents):
    agents.start("vm-a")
    scheduler.submit("slow-1", job_command("--sleep", "120"), max_runtime_s=2)
    job = scheduler.wait_status("slow-1", "FAILED", timeout_s=30)
    why, history = _explain(scheduler, job), scheduler.history("slow-1")
    assert "max_runtime_s" in job.message
    assert "stopped at max_runtime_s=2 (exit code 143)" in why, why
    assert history[-1][2] == "stopped at max_runtime_s=2 (exit code 143)", history[-1]


def test_a_job_that_exits_0_on_sigterm_at_its_timeout(scheduler, agents):
    agents.start("vm-a")
    scheduler.submit("trap-1", [sys.executable, "-c", TRAP_EXIT_0], max_runtime_s=2)
    job = scheduler.wait_status("trap-1", "FAILED", "SUCCEEDED", timeout_s=30)
    why, history = _explain(scheduler, job), scheduler.history("trap-1")
    assert job.status.value == "FAILED"
    assert "stopped at max_runtime_s=2 (exit code 0)" in why, why
