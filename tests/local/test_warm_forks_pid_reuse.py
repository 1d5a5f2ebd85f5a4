"""A ``WarmForks`` process remembers how each group it forked ended, by pid. The kernel gives a pid again once its
process is reaped, and soon where ``pid_max`` is 32,768 (the machines Zen is built on) and a run of the suite starts
far more processes than that: a group forked with the pid of one that had ended was answered as ended at once
("process exited with 0 before listening", the agent test failing), and its stop, taking it for ended, left it
running. Shown in a PID namespace of its own, where the next pid is set (``ns_last_pid``); skipped where no such
namespace may be made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
from pathlib import Path
from zen_dev.local.functions_server import Function, FunctionGroup, WarmForks
from tests.local.test_function_group import FLAKY, post_event, processes_of

tmp = Path(sys.argv[1])
with WarmForks(warm=()) as forks:
    first = FunctionGroup([], env={}, warm=(), forks=forks).start()  # no function: it ends at once
    assert first.process.wait(timeout=30) == 0
    Path("/proc/sys/kernel/ns_last_pid").write_text(str(first.process.pid - 1))  # the next fork gets its pid
    group = FunctionGroup([Function("flaky", 0, tmp / "a.log", {"FLAKY_LOG": str(tmp / "a")}, FLAKY)],
                          env={"FLAKY_FAILS": "0"}, warm=(), forks=forks)
    outcome = {"same_pid": None, "started": None, "served": None, "left": None}
    try:
        group.start(timeout_s=60)
        outcome["started"] = "yes"
        outcome["served"] = post_event(group.url("flaky"), "e-1")
    except Exception as exc:
        outcome["started"] = str(exc)
    outcome["same_pid"] = group.process is not None and group.process.pid == first.process.pid
    group.stop()
    outcome["left"] = [pid for pid in processes_of(1) if Path(f"/proc/{pid}/cmdline").read_bytes()
                       and pid != forks.process.pid]
print(json.dumps(outcome), flush=True)
"""


def _in_own_pid_namespace(tmp_path: Path) -> dict | None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT)])}
    for unshare in (["unshare", "--user", "--map-root-user"], ["unshare"]):
        try:
            done = subprocess.run([*unshare, "--pid", "--fork", "--mount-proc", sys.executable, "-c", SCRIPT,
                                   str(tmp_path)], env=env, capture_output=True, text=True, timeout=120)
        except FileNotFoundError:
            return None
        if done.stdout.strip():
            return json.loads(done.stdout.strip().splitlines()[-1])
        if "Traceback" in done.stderr and "ns_last_pid" not in done.stderr:
            raise AssertionError(done.stderr[-2000:])
    return None


def test_a_group_forked_with_the_pid_of_one_that_ended_runs_and_its_stop_ends_it(tmp_path):
    outcome = _in_own_pid_namespace(tmp_path)
    if outcome is None:
        pytest.skip("no PID namespace of its own here (unshare, ns_last_pid)")
    assert outcome["same_pid"], outcome  # the kernel gave the ended group's pid again
    assert (outcome["started"], outcome["served"]) == ("yes", 200), outcome
    assert outcome["left"] == [], outcome  # nothing of the group after its stop (the forks process alone)
