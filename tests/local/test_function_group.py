"""A group of functions (``FunctionGroup``: the local stack's five, the agent tests' three) serves each
function in a process of its own with its own environment and log, forked from one process that imported
their libraries once; a function that cannot start fails the start at once, and a stop leaves no process. Each
case runs with the group's own process and with one forked from a ``WarmForks`` (the agent tests')."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from tests.agent.helpers import alive
from zen_dev.local.functions_server import Function, FunctionGroup, PortHold, WarmForks, listening

FLAKY = Path(__file__).parent / "fixtures" / "flaky_main.py"


def post_event(url: str, event_id: str) -> int:
    body = json.dumps({"specversion": "1.0", "id": event_id, "source": "//test", "type": "test.event",
                       "datacontenttype": "application/json", "data": {"n": 1}}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/cloudevents+json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status


def processes_of(pid: int) -> list[int]:
    """``pid``'s descendants."""
    children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return children + [grand for child in children for grand in processes_of(child)]


@pytest.fixture(scope="module", params=["alone", "forked"])
def forks(request):
    if request.param == "alone":
        yield None
        return
    with WarmForks(warm=()) as forks:
        yield forks
    assert forks.process.returncode == 0


def test_each_function_runs_in_its_own_process_with_its_own_environment_and_a_stop_leaves_none(tmp_path, forks):
    logs = {name: tmp_path / f"{name}.jsonl" for name in ("a", "b")}
    functions = [Function("flaky", 0, tmp_path / f"{name}.log", {"FLAKY_LOG": str(log)}, FLAKY)
                 for name, log in logs.items()]
    group = FunctionGroup(functions, env={"FLAKY_FAILS": "0"}, log_path=tmp_path / "group.log", warm=(), forks=forks)
    with group:
        assert [post_event(f"http://127.0.0.1:{f.port}/", f"event-{i}") for i, f in enumerate(group.functions)] == [200, 200]
        spawned = processes_of(group.process.pid)
        assert len(spawned) == 4  # per function: its process (gunicorn's arbiter) and its worker
    assert [[json.loads(line)["id"] for line in log.read_text().splitlines()] for log in logs.values()] == [
        ["event-0"], ["event-1"]]  # each function wrote to its own FLAKY_LOG
    assert group.process.returncode is not None and not [pid for pid in spawned if alive(pid)]


def test_a_function_that_cannot_start_fails_the_start_at_once_and_leaves_no_process(tmp_path, forks):
    broken = tmp_path / "broken_main.py"
    broken.write_text("raise ImportError('this source cannot be imported')\n")
    fine = Function("flaky", 0, tmp_path / "ok.log", {"FLAKY_LOG": str(tmp_path / "x")}, FLAKY)
    group = FunctionGroup([fine, Function("nothing", 0, tmp_path / "broken.log", {}, broken)],
                          env={"FLAKY_FAILS": "0"}, warm=(), forks=forks)
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="process exited with"):
        group.start(timeout_s=60)
    assert time.monotonic() - began < 30
    assert "this source cannot be imported" in (tmp_path / "broken.log").read_text()
    group.process.wait(timeout=30)  # the group ends once the function that did start has stopped too
    assert not listening(group.functions[0].port)


def test_a_function_killed_by_a_signal_ends_the_group_by_that_signal(tmp_path, forks):
    """As a lone function server's process would: its Popen says -9, not an exit code made of it."""
    functions = [Function("flaky", 0, tmp_path / f"{n}.log", {"FLAKY_LOG": str(tmp_path / n)}, FLAKY)
                 for n in ("a", "b")]
    with FunctionGroup(functions, env={"FLAKY_FAILS": "0"}, warm=(), forks=forks) as group:
        os.kill(processes_of(group.process.pid)[0], signal.SIGKILL)
        assert group.process.wait(timeout=30) == -signal.SIGKILL
    # The other stopped with it; the killed one's gunicorn worker, its arbiter gone, notices within a second
    # or so and ends too.
    deadline = time.monotonic() + 15
    while any(listening(f.port) for f in group.functions) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(listening(f.port) for f in group.functions)


def test_a_held_port_is_given_to_no_other_bind_or_connection_but_its_server_listens_on_it():
    """A function's port is held from before its process starts until it listens: a port picked and let go
    was taken meanwhile by another test worker's pick, and that function never served."""
    with PortHold() as hold:
        picked = []
        for _ in range(2000):
            with socket.socket() as other:
                other.bind(("127.0.0.1", 0))
                picked.append(other.getsockname()[1])
        with socket.socket() as server, socket.socket() as source:
            server.bind(("127.0.0.1", 0))
            server.listen()
            source.connect(server.getsockname())
            picked.append(source.getsockname()[1])
        assert hold.port not in picked
        with socket.socket() as plain, pytest.raises(OSError):
            plain.bind(("127.0.0.1", hold.port))  # a bind without SO_REUSEADDR is refused ...
        with socket.socket() as server:  # ... one with it (as gunicorn, gRPC, http.server) listens beside the hold
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", hold.port))
            server.listen()
            assert listening(hold.port)
    with socket.socket() as plain:
        plain.bind(("127.0.0.1", hold.port))  # let go, it is anyone's
