"""A STOP that reaches the agent after its claim was confirmed but before the job's command starts (here:
while the job's secrets are read from Secret Manager, which may take up to 30 s; equally between the CONFIRM
and the start of a job without inputs) keeps the command from running: the user stopped the job before it
started, as the claim's own STOP handling says ("stopped before it started"). The agent started the command
all the same and read the STOP only once it supervised the running job, which it then SIGTERMed: the work ran."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.agent.fakes import FakeTransport, confirm_claims
from zen.agent.agent import Agent
from zen.agent.identity import Identity
from zen.agent.settings import AgentSettings
from zen.core.models import ControlAction, ControlMessage, Heartbeat, StartMessage

VM = "vm-stop"
IDENTITY = Identity(project="p", vm=VM, cluster="4xa100-40gb", region="us-central1", zone="us-central1-a",
                    from_environment=True)
SETTINGS = AgentSettings(heartbeat_s=0.2, stop_grace_s=2, poll_s=0.05, claim_timeout_s=5, claim_tries=3, lease_s=10,
                         vm_heartbeat_s=1000)
SECRET = "projects/my-project/secrets/token/versions/1"


def _run_with(tmp_path, arrive) -> tuple[Path, list[Heartbeat]]:
    """One agent taking job j1, whose secret read sees ``arrive(transport)`` happen; (its marker, j1's finals)."""
    ran, termed = tmp_path / "ran", tmp_path / "got-sigterm"
    script = (f"import signal, sys, time, pathlib\n"
              f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(termed)!r}).write_text('x'), sys.exit(0)))\n"
              f"pathlib.Path({str(ran)!r}).write_text('ran')\n"
              f"time.sleep(30)\n")
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(StartMessage(job_id="j1", attempt=1, cluster="4xa100-40gb", user_id="alice",
                                     command=[sys.executable, "-c", script], regions=["us-central1"],
                                     secrets={"TOKEN": SECRET}))
    confirm = confirm_claims(VM)

    def zen(message):  # a publish takes a moment, as Pub/Sub's does (a round trip)
        time.sleep(0.3)
        return confirm(message)

    transport.answer = zen

    def read_secret(reference: str) -> bytes:  # the user's stop comes while the agent reads the secret
        arrive(transport)
        return b"value"

    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(tmp_path / "work")), transport, local=True,
                  clock=transport.clock, read_secret=read_secret)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    agent.run()
    return ran, [m for m in transport.published if isinstance(m, Heartbeat) and m.job_id == "j1"
                 and m.status.value not in ("CLAIMED", "RUNNING")]


def _stop(transport, job_id="j1", reason="user stop") -> None:
    transport.controls.append(ControlMessage(vm=VM, job_id=job_id, attempt=1, action=ControlAction.STOP, reason=reason))


def test_a_stop_received_before_the_job_started_does_not_run_its_command(tmp_path):
    ran, [final] = _run_with(tmp_path, _stop)
    assert final.status.value == "STOPPED" and "stopped before it started (user stop)" in (final.message or ""), final
    assert not ran.exists(), "the job's command ran although its STOP had reached the agent before it started"


@pytest.mark.parametrize("before", ["offer", "other-attempt"])
def test_a_stop_behind_another_message_still_keeps_the_command_from_running(tmp_path, before):
    """The look for a STOP gave up at the first message not about its attempt (a start offered to the VM, an order
    about an attempt it does not hold): the STOP behind it was read once the command ran."""
    def arrive(transport) -> None:
        if before == "offer":  # a start Zen offered this VM as it was taking j1 (it looked idle)
            transport.offer(StartMessage(job_id="other", attempt=1, cluster="4xa100-40gb", user_id="bob",
                                         command=["true"], regions=["us-central1"]))
        else:  # an order about an attempt this VM does not hold (e.g. one it ran before)
            _stop(transport, "old", "attempt 1 was lost")
        _stop(transport)

    ran, [final] = _run_with(tmp_path, arrive)
    assert final.status.value == "STOPPED", final
    assert not ran.exists(), f"the command ran although its STOP came before its start (behind {before})"


def test_the_look_for_a_stop_does_not_hold_a_start_behind_a_running_attempts_reads():
    """On a VM running several jobs, another attempt's supervision reads the control subscription nearly always
    (a 0.2 s wait each time): the look waited for the role again and again, up to 64 times (12.8 s) per start."""
    import logging
    import threading

    from zen.agent.slots import ControlRouter

    class Quiet:  # a subscription with nothing in it: a read waits its whole timeout, as a streaming pull does
        def next_control(self, timeout_s):
            time.sleep(timeout_s)

    router = ControlRouter(Quiet(), VM, logging.LoggerAdapter(logging.getLogger("test"), {}))
    router.open(("j1", 1))
    running, done = ("other", 1), threading.Event()
    router.open(running)

    def supervise():
        while not done.is_set():
            router.next(running, 0.2)

    reader = threading.Thread(target=supervise)
    reader.start()
    try:
        time.sleep(0.1)
        began = time.monotonic()
        assert router.stop_waiting(("j1", 1)) is None
        assert time.monotonic() - began < 1.5, f"the start waited {time.monotonic() - began:.1f} s"
    finally:
        done.set()
        reader.join(5)
