"""A job stopped before it started never ran: it has no outputs, and ``zen jobs get`` says nothing of an upload that
failed. The final report's ``nothing uploaded to ... (no _ZEN_OUTPUTS.json: not whole)``, the line of a job stopped
over its disk share (its outputs left unsent), was written for every attempt whose outputs were not uploaded: ``zen jobs
get`` then showed "NOT whole: the upload failed or was cut" for a job whose upload never began (stopped, or ended in
its staging or its image's pull). The agent with the fake transport (no Cloud Storage: nothing is uploaded)."""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_stop_before_start import IDENTITY, SECRET, SETTINGS, VM, _stop
from zen.agent.agent import Agent
from zen.core.gcs import outputs_whereabouts
from zen.core.models import Heartbeat, StartMessage

OUTPUTS = "gs://out-bkt/runs"


def test_a_job_stopped_before_it_started_is_not_said_to_have_its_upload_cut(tmp_path):
    ran = tmp_path / "ran"
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(StartMessage(job_id="j1", attempt=1, cluster="4xa100-40gb", user_id="alice", outputs=OUTPUTS,
                                     command=[sys.executable, "-c", f"open({str(ran)!r}, 'w').write('ran')"],
                                     regions=["us-central1"], secrets={"TOKEN": SECRET}))
    confirm = confirm_claims(VM)
    transport.answer = lambda message: (time.sleep(0.3), confirm(message))[1]  # a round trip, as Pub/Sub's

    def read_secret(reference: str) -> bytes:  # the user's stop comes while the agent reads the secret
        _stop(transport)
        return b"value"

    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(tmp_path / "work")), transport, local=True,
                  clock=transport.clock, read_secret=read_secret)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    agent.run()
    [final] = [m for m in transport.published if isinstance(m, Heartbeat) and m.job_id == "j1"
               and m.status.value not in ("CLAIMED", "RUNNING")]

    assert final.status.value == "STOPPED" and not ran.exists(), final
    said = outputs_whereabouts(OUTPUTS, "j1", 1, 1, True, final.message)  # as zen jobs get shows it
    assert said == f"{OUTPUTS}/j1/attempt-1/ (whole once it holds _ZEN_OUTPUTS.json, written last)", final.message
