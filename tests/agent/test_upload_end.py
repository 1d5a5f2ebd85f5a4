"""The upload of a job's outputs after it ended (``zen.agent.attempt.AttemptRunner``): what may cut it, what
the final report says, and when it is sent while the VM shuts down. Real jobs, the Cloud Storage
stand-in, a fake Pub/Sub transport answering as Zen does (``zen.core.lifecycle``: every RUNNING heartbeat
of a STOPPING job is answered with STOP)."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import IDENTITY, VM, make_agent, start_message
from tests.agent.test_staging import client, objects  # noqa: F401 (fixture)
from zen.agent import shutdown
from zen.agent.agent import Agent
from zen.agent.settings import AgentSettings
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat

# Writes its checkpoint on SIGTERM and exits 0; says it is ready (its handler set) with a file.
CHECKPOINTS = ("import os, pathlib, signal, sys, time\n"
               "out = pathlib.Path(os.environ['ZEN_OUTPUT_DIR'])\n"
               "signal.signal(signal.SIGTERM, lambda *a: (out.joinpath('ckpt').write_text('step 7'), sys.exit(0)))\n"
               "pathlib.Path(sys.argv[1]).touch()\n"
               "time.sleep(60)\n")
WRITES_AND_EXITS = ("import os, pathlib, sys; pathlib.Path(os.environ['ZEN_OUTPUT_DIR'], 'result').write_text('r'); "
                    "pathlib.Path(os.environ['ZEN_OUTPUT_DIR'], 'big').write_bytes(b'0' * 30_000_000); "
                    "sys.exit(int(sys.argv[1]))")


def settings(tmp_path: Path, **fields) -> AgentSettings:
    return AgentSettings(**{"heartbeat_s": 0.2, "stop_grace_s": 5, "poll_s": 0.05, "claim_timeout_s": 5,
                            "lease_s": 10, "vm_heartbeat_s": 1000, "work_dir": str(tmp_path / "work"), **fields})


def uploading(message) -> bool:
    return (isinstance(message, Heartbeat) and message.status is AgentStatus.RUNNING
            and (message.message or "").startswith("zen: uploading outputs"))


def finals(transport: FakeTransport) -> dict[str, Heartbeat]:
    return {m.job_id: m for m in transport.published if isinstance(m, Heartbeat)
            and m.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)}


def test_stops_during_the_upload_neither_cut_it_nor_change_the_jobs_outcome(client, tmp_path):  # noqa: F811
    """A stopped job's checkpoint (written on SIGTERM) is uploaded after it stops: Zen's STOP to each
    RUNNING heartbeat of the upload once cut it and the files were deleted. A job that exited 0 as a
    STOP came was reported STOPPED instead of SUCCEEDED."""
    transport = FakeTransport(VM, virtual_time=False)
    ready = tmp_path / "ready"

    def zen(message):
        if not isinstance(message, Heartbeat):
            return []
        if message.status is AgentStatus.CLAIMED:
            return [ControlMessage(vm=VM, job_id=message.job_id, attempt=1, action=ControlAction.CONFIRM, reason="won")]
        stopping = message.job_id == "ck" and ready.exists()  # the user stopped "ck" once it was under way
        if message.status is AgentStatus.RUNNING and (stopping or uploading(message)):
            return [ControlMessage(vm=VM, job_id=message.job_id, attempt=1, action=ControlAction.STOP, reason="user")]
        return []

    transport.answer = zen
    transport.add_start(start_message("ck", command=[sys.executable, "-c", CHECKPOINTS, str(ready)],
                                      outputs="gs://out-bkt/r"))
    transport.add_start(start_message("done", command=[sys.executable, "-c", WRITES_AND_EXITS, "0"],
                                      outputs="gs://out-bkt/r"))
    make_agent(transport, settings(tmp_path)).run()

    ended = finals(transport)
    assert (ended["ck"].status, ended["ck"].exit_code) == (AgentStatus.STOPPED, 0)
    assert (ended["done"].status, ended["done"].exit_code) == (AgentStatus.SUCCEEDED, 0)
    assert all("while uploading" not in m.message for m in ended.values())
    stored = objects(client, "out-bkt")
    assert stored["r/ck/attempt-1/ckpt"] == b"step 7" and stored["r/done/attempt-1/result"] == b"r"
    stops_acked = [call for call in transport.calls if call[:3] == ("control_ack", "done", "STOP")]
    assert stops_acked  # each was acked (and logged), none cut the upload


@pytest.mark.parametrize("exit_code", [0, 3])
def test_a_shutdown_during_the_upload_of_a_job_that_ran_to_its_end(client, tmp_path, exit_code):  # noqa: F811
    """Exit 0: its outputs are not all saved, and the VM went away: PREEMPTED, so Zen requeues it (not
    FAILED for good for an infrastructure event). Exit 3: it failed on its own, requeued it would fail
    again: FAILED with its exit code. Both say why."""
    transport = FakeTransport(VM)  # the shutdown grace passes on the manual clock, while the upload runs
    transport.answer = lambda m: (
        [ControlMessage(vm=VM, job_id=m.job_id, attempt=1, action=ControlAction.CONFIRM, reason="won")]
        if isinstance(m, Heartbeat) and m.status is AgentStatus.CLAIMED else [])
    transport.add_start(start_message("up", command=[sys.executable, "-c", WRITES_AND_EXITS, str(exit_code)],
                                      outputs="gs://out-bkt/r"))
    agent = make_agent(transport, settings(tmp_path, stop_grace_s=0.5))
    answer = transport.answer
    transport.answer = lambda m: (uploading(m) and agent.request_shutdown("SIGTERM")) or answer(m)
    agent.run()

    final = finals(transport)["up"]
    expected = AgentStatus.PREEMPTED if exit_code == 0 else AgentStatus.FAILED
    assert (final.status, final.exit_code) == (expected, exit_code)
    assert f"zen: VM {VM} shut down while uploading outputs" in final.message
    assert transport.vm_states()[-1] == "STOPPING"


@pytest.fixture
def stalled_storage(monkeypatch):
    """Cloud Storage that accepts connections and never answers: an upload that outlasts any grace."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{server.getsockname()[1]}")
        yield


def test_a_shutdown_sends_the_final_report_by_its_deadline_whatever_the_upload(stalled_storage, tmp_path):
    """The job's stop grace, then 15 s of upload, then a 10 s join: the PREEMPTED report came ~35 s
    after SIGTERM, past systemd's kill at the grace + 15 s (TimeoutStopSec, startup.sh). Now every step
    takes what is left of one deadline, ``shutdown.SHUTDOWN_S`` past the grace."""
    transport = FakeTransport(VM)  # its control waits are skipped; the agent's clock adds them to real time
    clock = lambda: time.monotonic() + transport.clock.now  # noqa: E731
    ready, grace = tmp_path / "ready", 0.5
    ignores_term = ("import os, pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                    "pathlib.Path(os.environ['ZEN_OUTPUT_DIR'], 'ckpt').write_text('x'); "
                    "pathlib.Path(sys.argv[1]).touch(); time.sleep(60)")
    transport.add_start(start_message("ck", command=[sys.executable, "-c", ignores_term, str(ready)],
                                      outputs="gs://out-bkt/r"))
    agent = Agent(IDENTITY, settings(tmp_path, heartbeat_s=1, stop_grace_s=grace), transport, local=True, clock=clock)
    at: dict[str, float] = {}

    def zen(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            return [ControlMessage(vm=VM, job_id="ck", attempt=1, action=ControlAction.CONFIRM, reason="won")]
        if isinstance(message, Heartbeat) and message.status is AgentStatus.RUNNING and ready.exists():
            at.setdefault("sigterm", clock())
            agent.request_shutdown("SIGTERM")
        if isinstance(message, Heartbeat) and message.status is AgentStatus.PREEMPTED:
            at["preempted"] = clock()
        return []

    transport.answer = zen
    agent.run()

    final = finals(transport)["ck"]
    assert final.status is AgentStatus.PREEMPTED and "shut down while uploading outputs" in final.message
    assert at["preempted"] - at["sigterm"] <= grace + shutdown.SHUTDOWN_S
    assert transport.vm_states()[-1] == "STOPPING"


def test_the_upload_after_a_stop_ends_by_zens_stop_deadline(stalled_storage, tmp_path):
    """Zen ends a STOPPING job without its report ``stop_timeout_s`` after the stop; the upload of a
    stopped job's checkpoint had no bound, so the VM uploaded on (its slot held, its report too late)
    after Zen had called the job CANCELLED. A STOP carries the seconds left (``answer_within_s``): the
    upload is cut in time and the report says so, before that deadline."""
    from zen.agent.transport import ControlDelivery

    transport = FakeTransport(VM, virtual_time=False)
    ready, within = tmp_path / "ready", 8.0
    at: dict[str, float] = {}

    def zen(message):
        if not isinstance(message, Heartbeat):
            return []
        if message.status is AgentStatus.CLAIMED:
            return [ControlMessage(vm=VM, job_id="ck", attempt=1, action=ControlAction.CONFIRM, reason="won")]
        if message.status is AgentStatus.RUNNING and ready.exists():  # stopped once under way, as Zen sends it
            left = within - (time.monotonic() - at.setdefault("stop", time.monotonic()))
            order = ControlMessage(vm=VM, job_id="ck", attempt=1, action=ControlAction.STOP, reason="user")
            return [ControlDelivery(f"c-{time.monotonic()}", order.to_bytes(),
                                    {"vm": VM, "answer_within_s": f"{left:.0f}"}, lambda: None)]
        if message.status is AgentStatus.STOPPED:
            at["report"] = time.monotonic()
        return []

    transport.answer = zen
    transport.add_start(start_message("ck", command=[sys.executable, "-c", CHECKPOINTS, str(ready)],
                                      outputs="gs://out-bkt/r"))
    make_agent(transport, settings(tmp_path, stop_grace_s=0.5)).run()

    final = finals(transport)["ck"]
    assert (final.status, final.exit_code) == (AgentStatus.STOPPED, 0)
    assert "cut when Zen's stop deadline came" in final.message
    assert at["report"] - at["stop"] < within
