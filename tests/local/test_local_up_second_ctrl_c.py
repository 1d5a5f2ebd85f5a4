"""``zen local up`` in a terminal is stopped with Ctrl-C (it says so: "Stop everything: Ctrl-C here"). The stop
takes a while (the VMs' jobs handed back, up to 30 s, then every stand-in's and Postgres' stop, up to 10 s more),
and a second Ctrl-C while it runs is what an impatient user sends. A second SIGTERM is ignored while the stack stops
(tests/local/test_local_up_sigterm.py), but a second SIGINT raised KeyboardInterrupt in the middle of
``stack.down()``: ``zen`` exited 130 without a word, and the stand-ins (own sessions), the VMs' agents and
Postgres were left running, the record saying a stack was up. ``LocalStack.down`` itself ignores both meanwhile
(the demo stops its stack in a ``finally``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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
from zen.cli.kit import run
sys.exit(run(lambda: programs.cmd_local_up([])))
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
    raise AssertionError(f"{text!r} never came: {seen}")


def test_a_second_ctrl_c_while_the_stack_stops_does_not_abort_the_stop(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}:{ROOT}"}
    process = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        _wait_line(process, "Watch:")
        process.send_signal(signal.SIGINT)  # Ctrl-C, as the stack's own line says
        _wait_line(process, "down started")
        process.send_signal(signal.SIGINT)  # Ctrl-C again, the stop being slow
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
