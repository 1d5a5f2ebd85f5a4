"""``zen local up`` takes SIGTERM as Ctrl-C; once it stops the stack (the hand-back of the VMs' jobs, up to 30 s,
then SIGTERM/SIGKILL of every stand-in and Postgres' stop, up to 10 s more), a second SIGTERM (a supervisor or a
user repeating ``kill``) changes nothing: it raised KeyboardInterrupt in the middle of the stop, and the
stand-ins (own sessions) and Postgres were left running. A second Ctrl-C likewise (``zen local up`` says "Stop
everything: Ctrl-C here", and an impatient user sends another): it ended ``zen`` with no word, exit 130.
``LocalStack.down`` itself ignores both meanwhile (the demo stops its stack in a ``finally``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.local.test_standins_ctrl_c import HEAR_CTRL_C

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import sys, time
import zen_dev.local.stack as stack_module
from zen.cli import programs

class FakeStack:
    republished = 0
    def __init__(self, **kwargs):
        self.home = "home"
    def up(self):
        return {"ports": {"pubsub": 1}, "env": {"ZEN_DATABASE_URL": "postgresql://x"}, "logs": "logs",
                "console": "http://127.0.0.1:1"}
    def down(self):
        print("down started", flush=True)
        time.sleep(2.0)  # the hand-back and the processes' stop take this long (up to 40 s)
        print("down finished", flush=True)

stack_module.LocalStack = FakeStack
stack_module.read_stack = lambda home: {"running": True}
sys.exit(programs.cmd_local_up([]))
"""


def _wait_line(process, text, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    code = process.poll()
    raise AssertionError(f"{text!r} never came: {seen}" + (f" (exit {code}: {process.stderr.read()[-800:]})"
                                                           if code is not None else ""))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_second_signal_while_the_stack_stops_does_not_abort_the_stop(tmp_path, sig):
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}:{ROOT}"}
    process = subprocess.Popen([sys.executable, "-c", HEAR_CTRL_C + SCRIPT], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_line(process, "Watch:")
        process.send_signal(sig)
        _wait_line(process, "down started")
        process.send_signal(sig)  # e.g. the user's `kill` or Ctrl-C again, the stop being slow
        out, err = process.communicate(timeout=20)
        assert "down finished" in out and process.returncode == 0, (process.returncode, out, err[-800:])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


def test_the_stacks_own_stop_is_not_cut_by_a_ctrl_c(tmp_path, monkeypatch):
    """The demo's ``finally: stack.down()`` (and any caller): a Ctrl-C during the hand-back is ignored."""
    from zen_dev.local import stack as stack_module

    said = []

    def hand_back(processes, env):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # the signal is delivered by now: a KeyboardInterrupt would have been raised
        said.append("handed back")

    monkeypatch.setattr(stack_module, "hand_back", hand_back)
    monkeypatch.setattr(stack_module, "stop_processes", lambda processes, grace_s, record: ["pubsub"])
    monkeypatch.setattr(stack_module, "_stop_database", lambda home: ["postgres"])
    stack = stack_module.LocalStack.__new__(stack_module.LocalStack)
    stack.processes, stack.env, stack.home = {}, {}, tmp_path
    before = signal.getsignal(signal.SIGINT)
    assert stack.down() == ["pubsub", "postgres"] and said == ["handed back"]
    assert signal.getsignal(signal.SIGINT) is before  # given back after


def test_a_stack_stopped_by_zen_local_down_says_so_and_not_ctrl_c(tmp_path):
    """`zen local down` from another terminal removes the record: the terminal of `zen local up` (or the file its
    output goes to, `zen local up &`) said "stopping... (a second Ctrl-C is ignored ...)" though no Ctrl-C came,
    and nothing after it."""
    script = SCRIPT.replace('lambda home: {"running": True}', 'lambda home: None')  # the record is gone
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}:{ROOT}"}
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=60)
    said = result.stdout.split("Watch:", 1)[1].splitlines()[1:]
    assert result.returncode == 0 and "down finished" in result.stdout, (result.stdout, result.stderr[-800:])
    assert said[0] == "stopped by `zen local down`" and not any("Ctrl-C" in line for line in said), said
