"""A checkpoint restore that Cloud Storage refuses for the VM's own token (401 once the client's token refresh did
not help, or no token had at all: a ``google.auth`` error) is the VM's fault, as a staging so refused is: the attempt
is given back PREEMPTED (requeued without spending an attempt) at once, and counts toward retiring the VM
(``MAX_VM_FAULTS``, ``zen.agent.limits``). It was taken for an IAM grant propagating (403): asked again for
``REFUSED_FOR_S``, then the attempt FAILED with the agents' account's bucket permissions to check, so a VM whose token
is broken failed every checkpointing job it claimed and never retired (a token not had failed it as a manifest that
"cannot be read"). A 403 for good still fails the attempt and neither counts nor resets the VM's faults. The real
agent, the official client against the Cloud Storage stand-in."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc
from google.cloud import storage as gcs

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import VM, make_agent, start_message
from tests.agent.test_checkpoint_link import PREFIX, rerun_reading_step
from tests.agent.test_staging_faults import retiring_agent
from tests.agent.test_upload_end import finals, settings
from zen.agent import checkpoint_restore
from zen.agent.checkpoint import Checkpoint
from zen.core.checkpoints import StartCheckpoint, checkpoint_uri
from zen.core.models import AgentStatus

REFUSED = {"r1", "r2", "r3", "never"}  # the jobs whose restores Cloud Storage refuses the VM's token for


def refusing_the_token(monkeypatch, jobs: set[str]) -> None:
    """Cloud Storage answering 401 for the VM's token (its refresh did not help) to restores of ``jobs``' checkpoints."""
    manifest = Checkpoint._manifest

    def refused(self):
        if self._prefix.rstrip("/").rsplit("/", 1)[-1] in jobs:
            raise gexc.Unauthorized("Invalid Credentials")
        return manifest(self)

    monkeypatch.setattr(Checkpoint, "_manifest", refused)


@pytest.mark.parametrize("how", ["401", "token not had"])
def test_a_restore_refused_for_the_vms_token_gives_the_attempt_back_at_once(storage, tmp_path, monkeypatch, how):
    monkeypatch.setattr(checkpoint_restore, "REFUSED_FOR_S", 1.0)  # (a 403's wait, were it taken for one)
    monkeypatch.setattr(checkpoint_restore, "REFUSED_WAIT_S", 0.2)
    bucket = gcs.Client().create_bucket("ckpt-bkt")
    bucket.blob(PREFIX + "attempt-1/save-1/step").upload_from_string(b"step 1")
    bucket.blob(PREFIX + "LATEST.json").upload_from_string(
        '{"generation": "attempt-1/save-1/", "attempt": 1, "files": [{"path": "step", "size": 6}], "folders": []}')
    if how == "401":
        refusing_the_token(monkeypatch, {"big"})
    else:  # the stand-in's 401: the client's (anonymous) credentials cannot be refreshed, a google.auth error
        storage.state.deny(PREFIX, 401, "Invalid Credentials")
    transport = rerun_reading_step()
    make_agent(transport, settings(tmp_path)).run()
    final = finals(transport)["big"]
    assert final.status is AgentStatus.PREEMPTED, (final.status, final.message)
    assert "could not stage the job's checkpoint (requeued)" in final.message, final.message
    assert "gs://ckpt-bkt/" in final.message and "terraform/checkpoints.tf" not in final.message, final.message


def test_a_vm_whose_token_three_restores_in_a_row_refused_retires(storage, tmp_path, monkeypatch):
    """A restore refused for good for the job's prefix (403) between them neither counts nor resets them."""
    monkeypatch.setattr(checkpoint_restore, "REFUSED_FOR_S", 0.5)
    monkeypatch.setattr(checkpoint_restore, "REFUSED_WAIT_S", 0.1)
    gcs.Client().create_bucket("ckpt-bkt")
    refusing_the_token(monkeypatch, REFUSED)
    storage.state.deny("/den/", 403, "zen-agent@ does not have storage.objects.get access")
    transport = FakeTransport(VM, virtual_time=False)
    acks = [transport.add_start(start_message(job_id, checkpoint=StartCheckpoint(
        uri=checkpoint_uri("ckpt-bkt", "checkpoints", "4xa100-40gb", job_id), every=600, max_bytes=10**9)))
        for job_id in ("r1", "r2", "den", "r3", "never")]
    agent = retiring_agent(tmp_path, transport)
    transport.when_idle = lambda: agent.request_shutdown("nothing left")
    assert agent.run() == 0

    ended = {job_id: status for job_id, _, status, _ in transport.job_reports() if status not in ("CLAIMED", "RUNNING")}
    assert ended == {"r1": "PREEMPTED", "r2": "PREEMPTED", "den": "FAILED", "r3": "PREEMPTED"}, ended
    assert [start.ack_id for start in transport.starts] == [acks[-1]]  # never pulled: left for another VM
    assert agent.shutdown.reason == "deleted" and "RETIRED" in transport.vm_states()
    assert agent.pulls.exhausted().startswith("3 attempts in a row given back for this VM's own fault (the last: its credentials, checkpoint "
                                              "gs://ckpt-bkt/checkpoints/4xa100-40gb/r3/: 401 Invalid Credentials")
