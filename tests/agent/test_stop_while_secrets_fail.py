"""A user's STOP that reaches the agent while it reads the job's secrets, whose read then fails (the secret's version
disabled, the VM's account not granted it): the job never ran and its user had stopped it, so it ends as a stop
before the start does ("stopped before it started": CANCELLED, docs/explanations/delivery-guarantees.md), the
secret's failure said beside it. The agent reported the secret's failure alone: FAILED, its user told the job failed
(and notified so) although they had stopped it before it started. Real job process, the agent loop with the fake
Pub/Sub of the other agent tests."""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_stop_before_start import IDENTITY, SECRET, SETTINGS, VM, _stop
from zen.adapters.secret_manager import SecretDenied
from zen.agent.agent import Agent
from zen.core.models import Heartbeat, StartMessage


def test_a_stop_come_while_a_secret_read_fails_ends_the_attempt_stopped(tmp_path):
    ran = tmp_path / "ran"
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(StartMessage(job_id="j1", attempt=1, cluster="4xa100-40gb", user_id="alice",
                                     command=[sys.executable, "-c", f"open({str(ran)!r}, 'w').write('ran')"],
                                     regions=["us-central1"], secrets={"TOKEN": SECRET}))
    confirm = confirm_claims(VM)

    def zen(message):  # a publish takes a moment, as Pub/Sub's does (a round trip)
        time.sleep(0.3)
        return confirm(message)

    transport.answer = zen

    def read_secret(reference: str) -> bytes:  # the user's stop comes while the agent reads, then the read is refused
        _stop(transport)
        raise SecretDenied("403 Permission 'secretmanager.versions.access' denied")

    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(tmp_path / "work")), transport, local=True,
                  clock=transport.clock, read_secret=read_secret)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    agent.run()
    [final] = [m for m in transport.published if isinstance(m, Heartbeat) and m.job_id == "j1"
               and m.status.value not in ("CLAIMED", "RUNNING")]
    assert not ran.exists()
    assert final.status.value == "STOPPED", final
    assert "stopped before it started (user stop)" in (final.message or ""), final.message
    assert "secret TOKEN" in (final.message or ""), final.message  # the failure is said too
