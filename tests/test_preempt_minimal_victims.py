"""A preemption stops only the victims it needs (Kueue's minimal preemption): victims are taken cheapest first
until they free enough, then any of them the preemptor fits without is spared. Zen stopped every cheaper job it
walked past on the way to the one that freed enough: a 2-GPU job stopped for a 4-GPU preemptor that the next
4-GPU victim alone made room for, and its 2 GPUs then sat idle."""

from __future__ import annotations

from tests.test_queues import CLUSTER, statuses
from tests.test_queues_preemption import a100s, halves_config
from zen.store import repository

EIGHT = [{"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"], "preemption": "lower-priority"}]


def preempted(zen, *job_ids):
    with zen.db.transaction() as session:
        return [job_id for job_id in job_ids
                if any(e["reason"].startswith("preempted") for e in repository.job_history(session, job_id))]


def test_a_preemption_stops_no_job_the_preemptor_fits_without(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen = Zen(halves_config(config, EIGHT), db, publisher, clock)  # two jobs per VM: a 2-GPU job holds 2 of 8
    functions = FunctionsInvoker(zen)
    for job_id, gpus, priority in (("mid", 2, 1), ("big", 4, 0), ("small", 2, 0)):
        functions.submit(a100s(job_id, gpus, priority))
        clock.advance(1)
    assert statuses(zen, "mid", "big", "small") == ["QUEUED", "QUEUED", "QUEUED"]  # 8 of 8

    functions.submit(a100s("urgent", 4, 9))  # needs 4: big alone (4 GPUs, priority 0) frees enough

    assert statuses(zen, "urgent")[0] == "QUEUED"
    assert preempted(zen, "mid", "big", "small") == ["big"], "small was stopped though urgent fits without it"
