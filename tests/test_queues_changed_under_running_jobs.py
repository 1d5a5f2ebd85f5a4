"""Queues changed under running jobs: a cohort queue above its lowered quota is not borrowing (`zen explain` said
"2 borrowed" and `zen queues` borrowed_gpus 2 while nothing was lent), and a removed queue's admitted jobs still
hold GPUs (`zen queues` showed nothing of them)."""

from __future__ import annotations

from tests.test_queues import CLUSTER, statuses
from tests.test_queues_preemption import a100s, halves_config
from tests.test_queues_waiting import _why, make
from zen.jobs.queueing import Queueing
from zen.store.jobstore import PostgresJobTx

LAB = [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["alice"]},
       {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]}]


def test_a_cohort_queue_above_its_lowered_quota_is_not_said_to_borrow(config, db, publisher, clock):
    zen, functions = make(config, db, publisher, clock, LAB)
    for job_id, user in (("a0", "alice"), ("a1", "alice"), ("b0", "bob"), ("b1", "bob"), ("a2", "alice")):
        functions.submit({**a100s(job_id, 2, 0), "user_id": user})
        clock.advance(1)
    assert statuses(zen, "a0", "a1", "b0", "b1", "a2") == ["QUEUED"] * 4 + ["PENDING"]
    lowered = halves_config(config, [{**LAB[0], "quota": {CLUSTER: 2}}, LAB[1]])
    why = _why(zen, lowered, "a2")
    with zen.db.transaction() as session:
        rows = {r["queue"]: r for r in Queueing(lowered).summary(PostgresJobTx(session), clock())}
    # team-b holds all of its own 4: nothing is lent, team-a is 2 above its lowered quota
    assert "borrowed" not in why, why
    assert rows["team-a"]["borrowed_gpus"] == 0


def test_zen_queues_shows_the_gpus_a_removed_queues_jobs_still_hold(config, db, publisher, clock):
    """team-b borrows all of team-a's quota, then team-b is removed from the configuration: its jobs run on,
    holding 8 GPUs no configured queue counts, and `zen queues` showed nothing of them."""
    zen, functions = make(config, db, publisher, clock, LAB)
    for n in range(4):
        functions.submit({**a100s(f"b{n}", 2, 0), "user_id": "bob"})
        clock.advance(1)
    assert statuses(zen, "b0", "b1", "b2", "b3") == ["QUEUED"] * 4
    removed = halves_config(config, [LAB[0]])
    with zen.db.transaction() as session:
        rows = Queueing(removed).summary(PostgresJobTx(session), clock())
    assert sum(r["admitted_gpus"] for r in rows) == 8, rows
