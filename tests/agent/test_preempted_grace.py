"""A spot VM's preemption gives its jobs at most ``PREEMPTED_GRACE_S`` of their stop grace: GCE stops the VM about 30 s
after its notice, whatever the agent does, and a ``stop_grace_s`` longer than what those 30 s leave let it stop the VM
mid-grace, the checkpoint's last save and the PREEMPTED report lost (the job found silent after its heartbeat timeout).
The cap counts from the shutdown's request: a SIGTERM that came first (GCE's ACPI soft-off) included."""

from __future__ import annotations

import dataclasses
import time

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.helpers import job_command, wait_for
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from zen.agent.agent import Agent
from zen.agent.shutdown import PREEMPTED_GRACE_S, SHUTDOWN_S, Shutdown
from zen.core.models import AgentStatus, Heartbeat


def test_a_preemption_cuts_a_longer_grace_counted_from_a_sigterm_before_it():
    now = [100.0]
    shutdown = Shutdown(lambda: now[0], stop_grace_s=60.0)
    shutdown.request("SIGTERM")  # the soft-off's signal, before the metadata server's notice
    now[0] += 0.5
    shutdown.preempted()
    assert shutdown.reason == "SIGTERM"
    assert shutdown.left() == PREEMPTED_GRACE_S + SHUTDOWN_S - 0.5
    assert PREEMPTED_GRACE_S + SHUTDOWN_S + 2.0 <= 30.0  # the VM's STOPPING (2 s later) inside GCE's 30 s
    short = Shutdown(lambda: now[0], stop_grace_s=3.0)
    short.preempted()
    assert short.left() == 3.0 + SHUTDOWN_S  # a shorter grace is kept


def test_a_job_ignoring_sigterm_is_killed_at_the_preemptions_grace_not_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr("zen.agent.shutdown.PREEMPTED_GRACE_S", 0.5)  # 15 s in production
    transport = FakeTransport(VM, virtual_time=False)
    ready = tmp_path / "pid"  # written once SIGTERM is ignored
    transport.add_start(start_message("spot", command=job_command("--ignore-term", "--pidfile", str(ready),
                                                                  "--sleep", "60")))
    settings = dataclasses.replace(SETTINGS, work_dir=str(tmp_path / "work"), stop_grace_s=40.0)
    agent = Agent(IDENTITY, settings, transport, local=True)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    confirm = confirm_claims(VM)
    at: dict[str, float] = {}

    def scheduler(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.RUNNING and "notice" not in at:
            wait_for(ready.exists, 10, what="the job ignoring SIGTERM")
            at["notice"] = time.monotonic()
            agent.shutdown.preempted()  # the metadata server's instance/preempted (zen.agent.__main__)
        if isinstance(message, Heartbeat) and message.status is AgentStatus.PREEMPTED:
            at.setdefault("report", time.monotonic())
        return confirm(message)

    transport.answer = scheduler
    agent.run()
    took = at["report"] - at["notice"]
    assert took < 0.5 + SHUTDOWN_S, f"PREEMPTED sent {took:.1f} s after the notice (the job's grace: 40 s)"
