"""A demo whose ``zen demo`` (``make demo``) ended without stopping its stack (the terminal closed: SIGHUP; a
kill -9) leaves the stack running under ``.zen/demo``. The next ``make demo`` then refuses: ``a stack is already
running (pids ...); stop it with `zen local down```. But ``zen local down`` only looked for ``.zen/stack.json`` in
this folder or above (``running_home``), never ``.zen/demo``: it answered "no local stack is running", the demo's
stand-ins, VMs and Postgres kept running, and ``make demo`` kept refusing: no command of Zen's got the user out.
``zen local down`` stops a demo's left running here when no other stack runs, and ``--home`` names one; the
refusal names the command with the demo's folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from zen.cli.main import main
from zen_dev.local.stackfile import process_alive, read_stack, stack_file


def _left_running_demo(folder: Path) -> subprocess.Popen:
    """A demo stack's record as ``LocalStack._save`` writes it, for one stand-in still running."""
    home = folder / ".zen" / "demo"
    home.mkdir(parents=True)
    standin = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    record = {"env": {}, "ports": {}, "console": "http://127.0.0.1:8197/", "logs": str(home / "logs"),
              "processes": [{"name": "pubsub", "pid": standin.pid, "argv": ["python", "-m", "zen_dev.local.pubsub"]}]}
    stack_file(home).write_text(json.dumps(record))
    return standin


def test_the_way_out_make_demo_names_stops_a_demo_left_running(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    standin = _left_running_demo(tmp_path)
    try:
        assert main(["demo"]) == 1
        said = capsys.readouterr().err
        assert "already running" in said and "zen local down --home " in said and ".zen/demo`" in said, said
        main(["local", "down"])  # what it says to run, from where make demo runs
        down_said = capsys.readouterr().out
        deadline = time.monotonic() + 15
        while process_alive(standin.pid) and standin.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert standin.poll() is not None, f"`zen local down` said {down_said.strip()!r}; the demo's stack still runs"
        assert read_stack(tmp_path / ".zen" / "demo") is None
    finally:
        if standin.poll() is None:
            os.killpg(standin.pid, signal.SIGKILL)
            standin.wait(5)
