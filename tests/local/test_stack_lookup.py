"""`zen` finds a running local stack from a subfolder of the one it runs in, as git finds its
repository: from a subfolder, read commands said to run `zen local up`, which then failed with
"port(s) taken"."""

from __future__ import annotations

import json
import os

from zen_dev.local.stackfile import running_home, stack_env, stack_file


def test_a_stack_running_in_a_parent_folder_is_the_one_used(tmp_path, monkeypatch):
    home = tmp_path / ".zen"
    home.mkdir()
    record = {"env": {"PUBSUB_EMULATOR_HOST": "127.0.0.1:8085"}, "ports": {}, "logs": "",
              "processes": [{"name": "pubsub", "pid": os.getpid()}]}  # a live process: the stack runs
    stack_file(home).write_text(json.dumps(record))
    deep = tmp_path / "src" / "models"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)

    assert running_home() == home.resolve()
    assert stack_env() == record["env"]


def test_without_a_running_stack_above_nothing_is_found(tmp_path, monkeypatch):
    (tmp_path / ".zen").mkdir()  # a stack's folder, stopped
    monkeypatch.chdir(tmp_path)
    assert running_home() is None and stack_env() == {}


def test_a_stopped_stacks_job_output_is_found_from_a_subfolder(tmp_path, monkeypatch):
    """`zen logs` after the stack stopped read the output only from the stack's own folder: from a subfolder
    it asked for Google credentials to read Cloud Logging although .zen/joblogs was on disk."""
    logs = tmp_path / ".zen" / "joblogs"
    logs.mkdir(parents=True)
    deep = tmp_path / "src"
    deep.mkdir()
    monkeypatch.chdir(deep)
    monkeypatch.delenv("ZEN_DATABASE_URL", raising=False)
    monkeypatch.delenv("ZEN_CLOUDSQL_INSTANCE", raising=False)
    assert stack_env() == {"ZEN_JOB_LOGS_DIR": str(logs.resolve())}
    monkeypatch.setenv("ZEN_DATABASE_URL", "postgresql://elsewhere/zen")  # pointed at a database: not these
    assert stack_env() == {}


def test_a_process_that_exited_unreaped_is_not_alive():
    """A stand-in that ended while `zen local up` (its parent) slept stayed a zombie: kill(pid, 0) still
    succeeds, so `zen local down` waited its whole hand-back and grace, 40 s, on every stop."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    from zen_dev.local.stackfile import process_alive

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        stat = Path(f"/proc/{child.pid}/stat")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and " Z " not in stat.read_text():  # exited, not reaped (no poll())
            time.sleep(0.05)
        assert " Z " in stat.read_text()
        assert not process_alive(child.pid)
    finally:
        child.wait()
    assert process_alive(os.getpid())
