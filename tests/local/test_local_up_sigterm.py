"""``zen local up`` takes SIGTERM as Ctrl-C; once it stops the stack (the hand-back of the VMs' jobs, up to 30 s,
then SIGTERM/SIGKILL of every stand-in and Postgres' stop, up to 10 s more), a second SIGTERM (a supervisor or a
user repeating ``kill``) changes nothing: it raised KeyboardInterrupt in the middle of the stop, and the
stand-ins (own sessions) and Postgres were left running."""

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
    raise AssertionError(f"{text!r} never came: {seen}")


def test_a_second_sigterm_while_the_stack_stops_does_not_abort_the_stop(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}:{ROOT}"}
    process = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        _wait_line(process, "Watch:")
        process.send_signal(signal.SIGTERM)
        _wait_line(process, "down started")
        process.send_signal(signal.SIGTERM)  # e.g. the user's `kill` again, the stop being slow
        out, err = process.communicate(timeout=20)
        assert "down finished" in out and process.returncode == 0, (process.returncode, out, err[-800:])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
