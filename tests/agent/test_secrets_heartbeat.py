"""An attempt whose secrets are read slowly (Secret Manager retried with backoff, each answer within the client's
timeout: up to ``zen.agent.secrets.BUDGET_S`` and one read) keeps heartbeating meanwhile, as a staging does. It sent
nothing between its CONFIRM and its job's start, and the configuration allows a ``heartbeat_timeout_s`` shorter than
that wait (``agent_heartbeat_s`` a few seconds: 20 s and up): Zen took the attempt for lost (silent), spent an
attempt of the job (FAILED with ``max_attempts: 1``) and ran it again elsewhere, for Secret Manager's slowness. And a
STOP that comes while a read hangs ends the attempt (STOPPED) without waiting for the read. Real job process, the
agent loop with the fake Pub/Sub of the other agent tests."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_stop_before_start import IDENTITY, SECRET, SETTINGS, VM, _stop
from zen.agent.agent import Agent
from zen.core.models import Heartbeat, StartMessage

WAIT_S = 5.0  # for the state each test waits for (the agent heartbeats every SETTINGS.heartbeat_s, 0.2 s)


def run_agent(tmp_path, read_secret) -> tuple[list[Heartbeat], bool]:
    """Job j1's reports from one agent whose secret ``read_secret(transport)`` reads, and whether its command ran."""
    ran = tmp_path / "ran"
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(StartMessage(job_id="j1", attempt=1, cluster="4xa100-40gb", user_id="alice",
                                     command=[sys.executable, "-c", f"open({str(ran)!r}, 'w').write('ran')"],
                                     regions=["us-central1"], secrets={"TOKEN": SECRET}))
    transport.answer = confirm_claims(VM)
    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(tmp_path / "work")), transport, local=True,
                  clock=transport.clock, read_secret=lambda reference: read_secret(transport))
    transport.when_idle = lambda: agent.request_shutdown("test over")
    agent.run()
    return [m for m in transport.published if isinstance(m, Heartbeat) and m.job_id == "j1"], ran.exists()


def beats_running(transport: FakeTransport) -> bool:
    return any(isinstance(m, Heartbeat) and m.job_id == "j1" and m.status.value == "RUNNING"
               for m in list(transport.published))


def test_an_attempt_heartbeats_while_its_secrets_are_read(tmp_path):
    seen: list[bool] = []

    def read_secret(transport) -> bytes:  # Secret Manager slow to answer: the read ends once the attempt heartbeats
        deadline = time.monotonic() + WAIT_S
        while not beats_running(transport) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.append(beats_running(transport))
        return b"value"

    reports, ran = run_agent(tmp_path, read_secret)

    assert seen == [True], "no heartbeat of the attempt while its secret was read"
    assert reports[-1].status.value == "SUCCEEDED" and ran, reports[-1]


def test_a_stop_while_a_secret_read_hangs_ends_the_attempt_without_waiting_for_it(tmp_path):
    seen, looked = list[bool](), threading.Event()

    def read_secret(transport) -> bytes:  # the user's stop comes while Secret Manager does not answer
        _stop(transport)
        deadline = time.monotonic() + WAIT_S
        while not (stopped := [m for m in list(transport.published) if isinstance(m, Heartbeat)
                               and m.status.value == "STOPPED"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.append(bool(stopped))
        looked.set()
        return b"value"

    reports, ran = run_agent(tmp_path, read_secret)

    assert looked.wait(WAIT_S + 5)  # the read, left to end by itself, looked at what the agent had reported
    assert seen == [True], "the attempt's end waited for its secret's read"
    assert not ran
    final = reports[-1]
    assert final.status.value == "STOPPED", final
    assert "stopped before it started (user stop)" in (final.message or ""), final.message


def test_a_read_cut_by_a_stop_reads_no_further_secret(tmp_path):
    """The read left to end by itself once the attempt was STOPPED read the job's next secret too: Secret Manager
    served (and logged as accessed) a secret of a job that had ended before it started."""
    read: list[str] = []
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(StartMessage(job_id="j1", attempt=1, cluster="4xa100-40gb", user_id="alice",
                                     command=[sys.executable, "-c", "pass"], regions=["us-central1"],
                                     secrets={"A_TOKEN": SECRET, "B_TOKEN": SECRET.replace("/1", "/2")}))
    transport.answer = confirm_claims(VM)

    def read_secret(reference: str) -> bytes:  # the first read hangs until the attempt was reported STOPPED
        read.append(reference)
        if len(read) == 1:
            _stop(transport)
            deadline = time.monotonic() + WAIT_S
            while not any(isinstance(m, Heartbeat) and m.status.value == "STOPPED" for m in list(transport.published)) \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
        return b"value"

    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(tmp_path / "work")), transport, local=True,
                  clock=transport.clock, read_secret=read_secret)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    agent.run()
    for thread in [t for t in threading.enumerate() if t.name == "zen-transfer"]:  # the read, left to end by itself
        thread.join(WAIT_S + 5)

    finals = [m for m in transport.published if isinstance(m, Heartbeat) and m.status.value == "STOPPED"]
    assert finals and "stopped before it started (user stop)" in (finals[-1].message or ""), finals
    assert read == [SECRET], f"secrets read after the attempt was stopped: {read}"
