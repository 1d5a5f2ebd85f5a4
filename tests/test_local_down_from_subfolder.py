"""`zen local down` from a subfolder of the folder a stack runs in stops that stack, as every other `zen` command
run there finds and uses it (zen_dev.local.stackfile.running_home, "as git finds its repository"). It said "no
local stack is running" (exit 0) and left the stand-ins, the functions, the VMs' agents and Postgres up."""

from __future__ import annotations

import json
import subprocess
import sys

from zen.cli.main import main
from zen_dev.local.stackfile import running_home, stack_file


def test_local_down_from_a_subfolder_stops_the_stack_the_other_commands_use(tmp_path, monkeypatch, capsys):
    # A stand-in of the stack: a process of its own session, as LocalStack._spawn starts each one.
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        home = tmp_path / ".zen"
        home.mkdir()
        record = {"env": {}, "ports": {}, "logs": "", "processes": [{"name": "pubsub", "pid": process.pid}]}
        stack_file(home).write_text(json.dumps(record))
        sub = tmp_path / "src"
        sub.mkdir()
        monkeypatch.chdir(sub)
        assert running_home() == home.resolve()  # what `zen jobs`, `zen submit`, `zen logs` ... use from here

        code = main(["local", "down"])

        out = capsys.readouterr().out
        assert code == 0
        assert "no local stack is running" not in out, out
        assert process.wait(timeout=15) is not None  # the stack's process was stopped
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
