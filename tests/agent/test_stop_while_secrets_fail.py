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


def stopped_while_reading_secrets(tmp_path, read_secret, **start) -> tuple[Heartbeat, bool]:
    """The final report of job j1, whose secret ``read_secret`` reads (the user's STOP sent from it: ``_stop``), and
    whether its command ran. ``start``: more of its StartMessage (``outputs``)."""
    ran = tmp_path / "ran"
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(StartMessage(job_id="j1", attempt=1, cluster="4xa100-40gb", user_id="alice",
                                     command=[sys.executable, "-c", f"open({str(ran)!r}, 'w').write('ran')"],
                                     regions=["us-central1"], secrets={"TOKEN": SECRET}, **start))
    confirm = confirm_claims(VM)
    transport.answer = lambda message: (time.sleep(0.3), confirm(message))[1]  # a round trip, as Pub/Sub's
    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(tmp_path / "work")), transport, local=True,
                  clock=transport.clock, read_secret=lambda reference: read_secret(transport))
    transport.when_idle = lambda: agent.request_shutdown("test over")
    agent.run()
    [final] = [m for m in transport.published if isinstance(m, Heartbeat) and m.job_id == "j1"
               and m.status.value not in ("CLAIMED", "RUNNING")]
    return final, ran.exists()


def test_a_stop_come_while_a_secret_read_fails_ends_the_attempt_stopped(tmp_path):
    def read_secret(transport) -> bytes:  # the user's stop comes while the agent reads, then the read is refused
        _stop(transport)
        raise SecretDenied("403 Permission 'secretmanager.versions.access' denied")

    final, ran = stopped_while_reading_secrets(tmp_path, read_secret)
    assert not ran
    assert final.status.value == "STOPPED", final
    assert "stopped before it started (user stop)" in (final.message or ""), final.message
    assert "secret TOKEN" in (final.message or ""), final.message  # the failure is said too
