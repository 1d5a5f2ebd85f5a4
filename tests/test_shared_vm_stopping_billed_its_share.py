"""A VM that runs several jobs at once (``max_jobs_per_vm``) shuts down: its agent's last word, STOPPING, may be
read before the final reports of the attempts it ran (Pub/Sub keeps no order; a report is delivered again after a
failed try), or an attempt it ran ends by the sweep's silence after it. Each such attempt is billed its own GPUs and
its share of the VM (docs/explanations/accounting.md), not the whole VM: the STOPPING of an agent that lists no jobs
in it (an agent before it did) does not make Zen take the VM for one that ran one job at a time. It did: two 4-GPU
jobs sharing an 8-GPU VM for an hour were each billed 8 GPUs and the whole VM, the VM's hour charged twice."""

from __future__ import annotations

from datetime import timedelta

from tests.messages import heartbeat
from tests.test_jobs_per_vm import SHARED, by_type, shared  # noqa: F401 - the fixture
from zen.store import repository, usage


def vm_beat(seq: int, state: str, sent_at: str, **fields) -> dict:
    return {"kind": "vm", "vm": "vm-a", "cluster": SHARED, "region": "us-central1", "zone": "us-central1-a",
            "state": state, "seq": seq, "sent_at": sent_at, **fields}


def test_attempts_whose_end_is_read_after_their_shared_vms_stopping_are_billed_their_share(shared, clock):
    zen, functions = shared
    jobs = ("half-a", "half-b")
    for job_id in jobs:
        functions.submit(by_type(job_id, 4))
    for seq, job_id in enumerate(jobs, start=1):
        functions.heartbeat(heartbeat(job_id, "CLAIMED", seq, vm="vm-a"))
    for seq, job_id in enumerate(jobs, start=3):
        functions.heartbeat(heartbeat(job_id, "RUNNING", seq, vm="vm-a"))
    functions.heartbeat(vm_beat(5, "BUSY", clock().isoformat(), job_id="half-a", attempt=1,
                                jobs=[{"job_id": j, "attempt": 1} for j in jobs]))
    clock.advance(3600)

    # The VM is preempted: each attempt says PREEMPTED, then the VM STOPPING, as its agent sent it (no jobs listed);
    # Zen reads the STOPPING first.
    functions.heartbeat(vm_beat(8, "STOPPING", clock().isoformat()))
    for seq, job_id in enumerate(jobs, start=6):
        functions.heartbeat(heartbeat(job_id, "PREEMPTED", seq, vm="vm-a", message="VM vm-a shut down"))

    with zen.db.transaction() as session:
        assert {repository.get_job(session, j).status.value for j in jobs} == {"QUEUED"}
        rows = {j: usage.attempts_of_job(session, j)[0] for j in jobs}
        [total] = usage.run(session, "usage_by", by="total", since=clock() - timedelta(days=1))
    billed = {j: (r["gpus"], float(r["vm_share"])) for j, r in rows.items()}
    assert billed == {"half-a": (4, 0.5), "half-b": (4, 0.5)}, f"(GPUs, VM share) billed: {billed}"
    assert float(total["vm_seconds"]) == 3600.0  # one VM for an hour, not two
