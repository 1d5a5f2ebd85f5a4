"""A STOP that reaches the agent after its claim was confirmed but before the job's command starts (here:
while the job's secrets are read from Secret Manager, which may take up to 30 s; equally between the CONFIRM
and the start of a job without inputs) keeps the command from running: the user stopped the job before it
started, as the claim's own STOP handling says ("stopped before it started"). The agent started the command
all the same and read the STOP only once it supervised the running job, which it then SIGTERMed: the work ran."""

from __future__ import annotations

import sys
import time
from dataclasses import replace

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


def test_a_stop_received_before_the_job_started_does_not_run_its_command(tmp_path):
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
        transport.controls.append(ControlMessage(vm=VM, job_id="j1", attempt=1, action=ControlAction.STOP,
                                                 reason="user stop"))
        return b"value"

    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(tmp_path / "work")), transport, local=True,
                  clock=transport.clock, read_secret=read_secret)
    transport.when_idle = lambda: agent.request_shutdown("test over")

    agent.run()

    finals = [r for r in transport.job_reports() if r[2] not in ("CLAIMED", "RUNNING")]
    assert [r[2] for r in finals] == ["STOPPED"]
    [final] = [m for m in transport.published if isinstance(m, Heartbeat) and m.status.value == "STOPPED"]
    assert "stopped before it started (user stop)" in (final.message or ""), final.message
    assert not ran.exists(), "the job's command ran although its STOP had reached the agent before it started"
