"""``WarmForks.run_module`` (the agent tests' agents, the CLI tests' `zen`): a module forked from a process that
imported it runs as ``python -m`` runs it anew: its environment (its time zone, its output's buffering), arguments,
directory, session and empty stdin, its threads joined and exit handlers run (it still ``__main__``) before it ends
with its own code, a module not found as ``python -m`` says it; a forked group's output buffered as its environment
says; a process that imported a module which reads its environment at import refuses to fork one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zen_dev.local.functions_server import Function, PortHold, WarmForks, wait_for_port

TARGET = "tests.local.forked_main"
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("unbuffered, streams", [("1", "FileIO True False"), ("", "BufferedWriter False True")])
def test_a_forked_module_runs_and_ends_as_python_m_runs_it(tmp_path, unbuffered, streams):
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}, "FORKED_SAYS": "hello",
           "TZ": "Asia/Tokyo", "PYTHONPATH": os.pathsep.join(paths),
           **({"PYTHONUNBUFFERED": unbuffered} if unbuffered else {})}
    started = subprocess.run([sys.executable, "-m", TARGET, "a", "b"], env=env, cwd=tmp_path, capture_output=True,
                             text=True, stdin=subprocess.DEVNULL, start_new_session=True, timeout=30)
    with WarmForks(warm=(TARGET,)) as forks:  # (its own process's streams as this one's environment has them)
        forked = forks.run(TARGET, ["a", "b"], env, tmp_path, 30)
    assert started.stdout.splitlines() == [f"__main__ ['a', 'b'] hello {tmp_path} True True {streams} JST",
                                           "a thread joined before the end forked_main.py ['a', 'b']",
                                           f"an exit handler ran {TARGET}"]
    assert (forked.returncode, forked.stdout, forked.stderr) == (3, started.stdout, started.stderr) == (
        started.returncode, started.stdout, "to stderr\n")


def test_a_module_that_is_not_there_ends_as_python_m_ends(tmp_path):
    started = subprocess.run([sys.executable, "-m", "tests.local.no_such_module"], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=30)
    with WarmForks(warm=()) as forks:
        forked = forks.run("tests.local.no_such_module", [], dict(os.environ), tmp_path, 30)
    assert (forked.returncode, forked.stdout, forked.stderr) == (1, "", started.stderr) == (
        started.returncode, started.stdout, f"{sys.executable}: No module named tests.local.no_such_module\n")


def test_a_module_that_read_the_environment_at_its_import_is_never_forked_from(tmp_path):
    with WarmForks(warm=("google.auth.compute_engine._metadata",)) as forks:
        forked = forks.run(TARGET, [], dict(os.environ), tmp_path, 30)
    assert forked.returncode == 1 and forked.stdout == ""
    assert ("RuntimeError: google.auth.compute_engine._metadata read this process's environment at its import, "
            f"not {TARGET}'s") in forked.stderr


@pytest.mark.parametrize("unbuffered, streams", [("1", "FileIO True"), ("", "BufferedWriter False")])
def test_a_forked_group_buffers_its_output_as_its_own_environment_says(tmp_path, unbuffered, streams):
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},
           **({"PYTHONUNBUFFERED": unbuffered} if unbuffered else {})}
    log = tmp_path / "functions.log"
    with WarmForks(warm=("functions_framework",)) as forks, PortHold() as hold:
        function = Function("said", hold.port, source=Path(__file__).with_name("printing_function.py"))
        group = forks.start([function], env, log)
        try:
            wait_for_port(hold.port, 30, group)
        finally:
            group.stop()
    assert log.read_text().splitlines()[0] == f"stdout {streams}"


def test_a_request_interrupted_before_its_answer_is_read_fails_the_next_not_hands_it_that_answer(tmp_path):
    """Ctrl-C (or a signal's handler raising) between a request and its answer left the answer in the pipe: the next
    request read it as its own (a poll's exit code 0 taken for a pid, a later signal sent to process group 0)."""
    with WarmForks(warm=()) as forks:
        answers = forks.process.stdout

        class Interrupted:
            def readline(self):
                forks.process.stdout = answers
                raise KeyboardInterrupt

        forks.process.stdout = Interrupted()  # type: ignore[assignment]
        with pytest.raises(KeyboardInterrupt):
            forks.run_module(TARGET, [], dict(os.environ), tmp_path / "first.log")
        with pytest.raises(RuntimeError, match="out of step"):
            forks.run_module(TARGET, [], dict(os.environ), tmp_path / "second.log")
