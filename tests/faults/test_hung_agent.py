"""End to end, a fault: an agent that cannot run (SIGSTOP: deadlocked, starved, stalled on a disk) under
a running job. Zen takes the attempt for lost once its heartbeats stop and runs the job again on
another VM; the first attempt's process must be dead by then, although its agent never ran again to
stop it: its supervisor kept the attempt's lease and fenced it (``zen.agent.launch``, ``zen.agent.fence``).

The job appends ``<attempt> <wall time>`` to a file every 50 ms (attempt 1 for a minute, longer than
Zen's deadline and the fence's, so only the fence can end it in time; the next for 6 s, still running when
the agent comes back); the check is that no line of attempt 1 is written after the first line of attempt 2
(with the agent stopped for longer than Zen's deadline).
On code whose fence lived only in the agent, attempt 1 wrote on for as long as its agent was stopped."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.stack_support import free_base_port, history, home  # noqa: F401 - the fixture
from tests.faults.stack import until
from zen_dev.local.environment import overridden_environ
from zen_dev.local.stack import LocalStack, Ports

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).parent / "fixtures"
JOB = """
import os, sys, time
path, attempt = sys.argv[1], os.environ["ZEN_JOB_ATTEMPT"]
with open(path, "a") as out:
    out.write(f"pid {attempt} {os.getpid()} {os.getppid()}\\n"); out.flush()
    end = time.time() + float(sys.argv[2] if attempt == "1" else sys.argv[3])
    while time.time() < end and not (len(sys.argv) > 4 and os.path.exists(sys.argv[4])):
        out.write(f"{attempt} {time.time():.3f}\\n"); out.flush()
        time.sleep(0.05)
"""


def _agent_of(pid: int) -> int:
    """The agent process above a job's: its supervisor's parent (the supervisor runs ``zen/agent/launch.py``; the
    stand-in's agents are forked, their command line their forking process's)."""
    while pid > 1:
        parent = _parent(pid)
        if any(arg.endswith(b"zen/agent/launch.py") for arg in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")):
            return parent
        pid = parent
    raise AssertionError("no agent above the job's process")


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _job(db, job_id: str) -> dict:
    from zen.store import repository

    with db.transaction() as session:
        job = repository.get_job(session, job_id)
    return job.public_view() if job else {}


def start_writing(stack: LocalStack, db, runs: Path, job_id: str, first_s: int, then_s: int,
                  end_file: Path | None = None) -> list[list[str]]:
    """Submit ``JOB`` as alice (attempt 1 writing ``first_s`` seconds, a later one ``then_s``; any attempt ends sooner
    once ``end_file`` exists) and wait for attempt 1 to run: its ``pid`` line."""
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    body = {"job_id": job_id, "user_id": "alice", "cluster": "1xl4", "max_attempts": 3,
            "command": [sys.executable, "-c", JOB, str(runs), str(first_s), str(then_s),
                        *([str(end_file)] if end_file else [])]}
    publisher.publish(publisher.topic_path(stack.config.project, stack.config.topics.job_submitted),
                      json.dumps(body).encode(), **stack.sender("alice")).result(30)
    began = until(lambda: [row for row in _lines(runs) if row[:2] == ["pid", "1"]], 120)
    assert began, f"attempt 1 never ran: {_job(db, job_id)}; {history(job_id)}"
    return began


def test_a_hung_agent_never_lets_its_job_run_beside_the_next_attempt(home, tmp_path, stack_forks):  # noqa: F811
    from zen.store.db import Database

    stack = LocalStack(home=home, config_path=FIXTURES / "hung-agent.yaml",
                       scenario=FIXTURES / "hung-agent-scenario.yaml", tick_every_s=1.0,
                       ports=Ports.from_base(free_base_port(start=25000)), fresh=True, forks=stack_forks)
    runs = tmp_path / "runs.txt"
    agent = None
    record = stack.up()
    try:
        with overridden_environ(record["env"]):
            db = Database.from_env()
            began = start_writing(stack, db, runs, "hung-1", 60, 6)
            time.sleep(2)  # a few heartbeats in: the attempt is RUNNING, its lease renewed
            agent = _agent_of(int(began[0][2]))
            os.kill(agent, signal.SIGSTOP)
            stopped_at = time.time()
            second = until(lambda: [row for row in _lines(runs) if row[:2] == ["pid", "2"]], 90)
            assert second, f"Zen never ran attempt 2: {_job(db, 'hung-1')}; {history('hung-1')}"
            time.sleep(3)  # both would run together now, were attempt 1 not fenced
            os.kill(agent, signal.SIGCONT)
            resumed_at, agent = time.time(), None
            done = until(lambda: (job := _job(db, "hung-1")).get("status") in ("SUCCEEDED", "FAILED") and job, 90)
            assert done and done["status"] == "SUCCEEDED" and done["attempt"] == 2, done
    finally:
        if agent is not None:
            with contextlib.suppress(ProcessLookupError):  # its VM deleted meanwhile
                os.kill(agent, signal.SIGCONT)
        stack.down()
    rows = [row for row in _lines(runs) if row[0] != "pid"]
    first_written = {attempt: min(float(at) for a, at in rows if a == attempt) for attempt in ("1", "2")}
    last_of_1 = max(float(at) for a, at in rows if a == "1")
    overlap = last_of_1 - first_written["2"]
    assert overlap < 0, (f"attempt 1 wrote {overlap:.1f} s past attempt 2's start (agent stopped for "
                         f"{resumed_at - stopped_at:.0f} s)")
    # Fenced while its agent was still stopped, not when the agent came back.
    assert last_of_1 < resumed_at - 1
