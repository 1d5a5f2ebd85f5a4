"""A VM whose disk fails (EIO, ENOSPC) retires after 3 stagings in a row it failed (zen.agent.limits); a restore
of a job's checkpoint writes to that same disk, but its disk errors did not count: a job with a checkpoint and no
inputs was reported PREEMPTED (requeued for free) each time, and the VM took job after job, never retired."""

from __future__ import annotations

import errno

from google.cloud import storage as gcs

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import VM, start_message
from tests.agent.test_staging_faults import retiring_agent
from zen.agent import checkpoint_restore
from zen.agent.checkpoint import Checkpoint
from zen.agent.staging import Progress
from zen.core.checkpoints import StartCheckpoint, checkpoint_uri


def test_a_vm_whose_disk_fails_three_checkpoint_restores_in_a_row_retires(storage, tmp_path, monkeypatch):
    client = gcs.Client()
    client.create_bucket("ckpt-bkt")
    specs = {}
    for job_id in ("c1", "c2", "c3", "c4", "c5", "never"):  # each saved a checkpoint in its attempt 1
        spec = specs[job_id] = StartCheckpoint(uri=checkpoint_uri("ckpt-bkt", "checkpoints", "4xa100-40gb", job_id),
                                               every=600, max_bytes=10**6)
        first = Checkpoint(spec, tmp_path / "saved" / job_id, 1, lambda: client)
        first.prepare()
        (first.directory / "model.pt").write_text("epoch 1")
        assert first.save("every 600 s")

    def worn(bucket, prefix, directory, manifest, progress: Progress, cancel):  # a write to this VM's disk
        raise OSError(errno.EIO, "Input/output error", str(directory / "model.pt"))

    monkeypatch.setattr(checkpoint_restore, "download", worn)
    transport = FakeTransport(VM, virtual_time=False)
    for job_id in ("c1", "c2", "c3", "c4", "c5"):
        transport.add_start(start_message(job_id, attempt=2, checkpoint=specs[job_id]))
    left = transport.add_start(start_message("never", attempt=2, checkpoint=specs["never"]))
    agent = retiring_agent(tmp_path, transport)
    transport.when_idle = lambda: agent.request_shutdown("nothing left")
    assert agent.run() == 0

    ended = {job_id: status for job_id, _, status, _ in transport.job_reports() if status not in ("CLAIMED", "RUNNING")}
    assert ended == {"c1": "PREEMPTED", "c2": "PREEMPTED", "c3": "PREEMPTED"}, ended  # then the VM retires
    assert [start.ack_id for start in transport.starts][-1] == left and len(transport.starts) == 3  # c4, c5: left
    assert agent.pulls.exhausted() is not None and "this VM's own fault (the last: its disk" in agent.pulls.exhausted()
