"""`zen local down --home DIR` with DIR the folder a stack runs in (where `zen local up` ran, as the docs' `DIR`
reads), not its `.zen`, stops that stack. It said "no local stack is running" (exit 0) and left the stand-ins,
the functions, the VMs' agents and Postgres up."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from zen.cli.main import main
from zen_dev.local.stackfile import stack_file


@pytest.fixture
def stack(tmp_path):
    """A stack recorded in ``tmp_path/project/.zen``, its one process (of its own session, as LocalStack._spawn starts
    each) still running: yields that process, killed at the end if still up."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        home = tmp_path / "project" / ".zen"
        home.mkdir(parents=True)
        record = {"env": {}, "ports": {}, "logs": "", "processes": [{"name": "pubsub", "pid": process.pid}]}
        stack_file(home).write_text(json.dumps(record))
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_local_down_with_the_stacks_folder_as_home_stops_it(stack, tmp_path, monkeypatch, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no stack here or above: --home alone names it

    code = main(["local", "down", "--home", str(tmp_path / "project")])

    out = capsys.readouterr().out
    assert code == 0
    assert "no local stack is running" not in out, out
    assert "pubsub" in out, out
    assert stack.wait(timeout=15) is not None  # the stack's process was stopped


def test_local_down_with_a_subfolder_as_home_leaves_the_stack_above_it(stack, tmp_path, monkeypatch, capsys):
    """--home names a stack: one running in a folder above the one named is not it."""
    sub = tmp_path / "project" / "src"
    sub.mkdir()
    monkeypatch.chdir(tmp_path)

    assert main(["local", "down", "--home", str(sub)]) == 0
    assert "no local stack is running" in capsys.readouterr().out
    assert stack.poll() is None  # still running: Popen.poll reaps it were it stopped


def test_local_down_with_the_stacks_dot_zen_as_home_still_stops_it(stack, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    code = main(["local", "down", "--home", str(tmp_path / "project" / ".zen")])

    assert code == 0
    assert "pubsub" in capsys.readouterr().out
    assert stack.wait(timeout=15) is not None
