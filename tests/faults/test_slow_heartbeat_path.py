"""End to end, a fault: the heartbeat function stops answering for 30 s (SIGSTOP: at its instance limit, out of
database connections, a bad deploy of that one function) while the ticks run on. Pub/Sub accepts every report the
agent publishes, so the agent's fence stays up and its job runs on; Zen hears nothing. Zen took the attempt for
lost after ``heartbeat_timeout_s`` (15 s here): it stopped a healthy job and ran it again, and, had the STOP been
late, the rerun would have run beside it. Each tick now probes the heartbeat path (``zen.jobs.probes``): a probe
that does not come through holds every silence, and the job runs to its end as attempt 1.

The job appends ``<attempt> <wall time>`` to a file every 50 ms (attempt 1 until told to end, ``AFTER_S`` past the
stall, 50 s at most); the checks are that no attempt 2 ever starts and that attempt 1 wrote through the stall.
Real agents, the real functions, the stand-ins."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from tests.faults.stack import until
from tests.faults.test_hung_agent import FIXTURES, _job, _lines, start_writing
from tests.stack_support import free_base_port, history, home  # noqa: F401 - the fixture
from zen_dev.local.environment import overridden_environ
from zen_dev.local.stack import FUNCTIONS, LocalStack, Ports

pytestmark = pytest.mark.e2e
AFTER_S = 5  # attempt 1 runs on this long once the function answers again: its reports' backlog heard, ticks run


def _serving(port: int) -> list[int]:
    """The processes holding the socket that listens on ``port`` (a function's server and its workers)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                    pids.append(int(proc.name))
    return pids


def test_a_stalled_heartbeat_function_neither_stops_nor_reruns_a_healthy_job(home, tmp_path, stack_forks):  # noqa: F811
    from zen.store.db import Database

    ports = Ports.from_base(free_base_port(start=27000))  # not test_drained_vm_claims' 26000: both may start at once
    stack = LocalStack(home=home, config_path=FIXTURES / "hung-agent.yaml",
                       scenario=FIXTURES / "hung-agent-scenario.yaml", tick_every_s=1.0, ports=ports, fresh=True,
                       forks=stack_forks)
    runs, end = tmp_path / "runs.txt", tmp_path / "end"
    stalled: list[int] = []
    record = stack.up()
    try:
        with overridden_environ(record["env"]):
            db = Database.from_env()
            start_writing(stack, db, runs, "steady-1", 50, 5, end_file=end)
            time.sleep(3)  # the attempt RUNNING, its reports and the ticks' probes coming through
            stalled = _serving(ports.functions + list(FUNCTIONS).index("on_heartbeat"))
            assert stalled, "no process serves the heartbeat function"
            for pid in stalled:
                os.kill(pid, signal.SIGSTOP)
            stalled_at = time.time()
            time.sleep(30)  # twice the heartbeat timeout; the agent's fence is renewed by Pub/Sub's acceptance
            for pid in stalled:
                os.kill(pid, signal.SIGCONT)
            resumed_at, stalled = time.time(), []
            until(lambda: any(row[0] == "1" and float(row[1]) > resumed_at + AFTER_S for row in _lines(runs))
                  or (job := _job(db, "steady-1")).get("attempt") != 1 or job.get("status") != "RUNNING", AFTER_S + 30)
            end.touch()  # (or attempt 1 was taken for lost, or ended: the checks below say so)
            done = until(lambda: (job := _job(db, "steady-1")).get("status") in ("SUCCEEDED", "FAILED") and job, 120)
            assert done, f"the job never ended: {_job(db, 'steady-1')}; {history('steady-1')}"
            assert (done["status"], done["attempt"]) == ("SUCCEEDED", 1), (done, history("steady-1"))
    finally:
        for pid in stalled:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        stack.down()
    rows = [row for row in _lines(runs) if row[0] != "pid"]
    assert not [row for row in rows if row[0] == "2"], "the job ran again"
    assert max(float(at) for a, at in rows if a == "1") > resumed_at > stalled_at  # it ran through the stall
