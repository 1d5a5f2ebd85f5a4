"""The store's look for queued jobs asking more GPUs of one VM than their cluster's VMs have now
(``JobTx.queued_jobs_gpus_above``: its ``gpu_count`` lowered while they waited; the tick holds them before its
scaling pass, ``zen.jobs.claims.recleared``), alike in Postgres and in memory."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.test_jobstore_contract import CLUSTER, NOW, REGION, a_job, inserted, moved, store  # noqa: F401 - fixture
from zen.core.gang_records import GangNode
from zen.core.models import Job, JobStatus


def queued(job_id: str, gpus: int, asked: dict[str, Any] | None = None, **changes: Any) -> Job:
    request = {"job_id": job_id, "command": ["true"], **(asked or {})}
    return a_job(job_id, JobStatus.QUEUED, regions=[REGION], request=request, gpus=gpus, **changes)


def test_queued_jobs_asking_more_gpus_of_a_vm_than_it_has_are_found_oldest_first(store):  # noqa: F811 - the fixture
    """By shape (its gpu_count), else its share of each VM (gpus over its nodes); not one that fits, nor a gang with a
    node claimed (it waits with its nodes), nor a job that is not QUEUED, nor another cluster's."""
    node = GangNode(rank=0, vm="vm-a", region=REGION, zone=f"{REGION}-a", beat_at=NOW)
    two = {"nodes": 2}
    inserted(store, queued("shape", 8, {"gpu_count": 6}), queued("fits", 8, {"gpu_count": 4}), queued("whole", 8),
             queued("gang", 16, two, nodes=2), queued("small-gang", 8, two, nodes=2),
             queued("claimed", 16, two, nodes=2), a_job("pending", gpus=8))
    for second, job_id in enumerate(["whole", "gang", "shape", "fits", "small-gang", "claimed"]):
        gang = {"gang": [node]} if job_id == "claimed" else {}
        moved(store, job_id, [], queued_at=NOW + timedelta(seconds=second), **gang)
    with store.transaction() as tx:
        assert tx.queued_jobs_gpus_above(CLUSTER, 4, 10) == ["whole", "gang", "shape"]
        assert tx.queued_jobs_gpus_above(CLUSTER, 4, 1) == ["whole"]
        assert tx.queued_jobs_gpus_above(CLUSTER, 6, 10) == ["whole", "gang"]
        assert tx.queued_jobs_gpus_above(CLUSTER, 8, 10) == []
        assert tx.queued_jobs_gpus_above("other", 4, 10) == []
