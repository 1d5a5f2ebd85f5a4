"""A cluster's ``max_jobs_per_vm`` lowered to 1 while jobs that asked for part of a VM wait in a queue: each still
holds the GPUs recorded at its submission (``zen.core.cluster_config.gpus_held``), and the pass admits it once
they fit its queue's quota (zen.jobs.queueing), as ``zen explain`` says they do. Against a real Postgres."""

from __future__ import annotations

import pytest

from tests.test_queues import CLUSTER, statuses
from tests.test_queues_preemption import a100s, halves_config
from zen.jobs.queueing import Queueing
from zen.store import repository
from zen.store.jobstore import PostgresJobTx

QUEUE = [{"name": "research", "quota": {CLUSTER: 4}, "users": ["alice"]}]


@pytest.mark.parametrize("end", ["stop", "tick"])
def test_a_two_gpu_job_waiting_since_before_one_job_per_vm_is_admitted_into_two_free_gpus(
        config, db, publisher, clock, db_url, monkeypatch, end):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    sharing = Zen(halves_config(config, QUEUE), db, publisher, clock)  # two 2-GPU jobs per 4-GPU VM
    for job_id in ("j1", "j2", "j3"):
        FunctionsInvoker(sharing).submit(a100s(job_id, 2, 0))
        clock.advance(1)
    assert statuses(sharing, "j1", "j2", "j3") == ["QUEUED", "QUEUED", "PENDING"]

    whole = Zen(halves_config(config, QUEUE).model_copy(update={"clusters": [  # the operator goes back to one per VM
        c.model_copy(update={"max_jobs_per_vm": 1}) if c.name == CLUSTER else c for c in config.clusters]}),
        db, publisher, clock)
    FunctionsInvoker(whole).stop({"job_id": "j1", "reason": "not needed"})  # its 2 GPUs come back: 2 of 4 held
    if end == "tick":
        whole.on_scale_tick()
    with whole.db.transaction() as session:
        why = Queueing(whole.config).why_pending(PostgresJobTx(session), repository.get_job(session, "j3"))
    assert statuses(whole, "j1", "j2", "j3") == ["CANCELLED", "QUEUED", "QUEUED"], why


def test_jobs_waiting_since_before_one_job_per_vm_all_go_into_a_raised_quota_at_one_tick(
        config, db, publisher, clock, db_url, monkeypatch):
    """Four 2-GPU jobs wait when the quota is raised to hold them all and one job per VM: one tick admits the four.
    The pass read one job per whole VM free (8 GPUs: two jobs) and left 4 GPUs idle for another tick, then more."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    sharing = Zen(halves_config(config, QUEUE), db, publisher, clock)  # two 2-GPU jobs per 4-GPU VM, 4 GPUs of quota
    jobs = [f"j{n}" for n in range(6)]
    for job_id in jobs:
        FunctionsInvoker(sharing).submit(a100s(job_id, 2, 0))
        clock.advance(1)
    assert statuses(sharing, *jobs) == ["QUEUED"] * 2 + ["PENDING"] * 4

    raised = [{**QUEUE[0], "quota": {CLUSTER: 12}}]  # 4 held, 8 free: the four waiting jobs' GPUs
    whole = Zen(halves_config(config, raised).model_copy(update={"clusters": [
        c.model_copy(update={"max_jobs_per_vm": 1}) if c.name == CLUSTER else c for c in config.clusters]}),
        db, publisher, clock)
    whole.on_scale_tick()
    assert statuses(whole, *jobs) == ["QUEUED"] * 6
