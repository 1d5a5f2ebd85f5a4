"""`zen queues`' borrowed_gpus and `zen explain` after a cohort's quota was lowered under what its jobs hold: the
cohort's GPUs beyond its quotas' sum lent by nobody were taken as lowered by every member above its quota, each on
its own: team-b, whose quota was never lowered and who borrows team-c's unused quota, was said to borrow nothing,
and no queue borrowed what team-c lends. What is borrowed is shared out once; where a quota was lowered, `zen explain`
says the part above is borrowed or held since (which quota went down is not recorded)."""

from __future__ import annotations

from tests.test_queues import CLUSTER, statuses
from tests.test_queues_preemption import a100s, halves_config
from tests.test_queues_waiting import _why, make
from zen.jobs.lending import borrowed
from zen.jobs.queueing import Queueing
from zen.store.jobstore import PostgresJobTx

LAB = [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["alice"]},
       {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]},
       {"name": "team-c", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["carol"]}]


def test_what_the_others_lend_is_borrowed_once_after_a_quota_was_lowered(config, db, publisher, clock):
    zen, functions = make(config, db, publisher, clock, LAB)
    order = [("a0", "alice"), ("a1", "alice"), ("c0", "carol"), ("b0", "bob"), ("b1", "bob"), ("b2", "bob"),
             ("b3", "bob")]
    for job_id, user in order:
        functions.submit({**a100s(job_id, 2, 0), "user_id": user})
        clock.advance(1)
    assert statuses(zen, *[j for j, _ in order]) == ["QUEUED"] * 6 + ["PENDING"]  # a 4/4, c 2/4, b 6/4: 12 of 12
    lowered = halves_config(config, [{**LAB[0], "quota": {CLUSTER: 2}}, LAB[1], LAB[2]])  # team-a: 4 -> 2
    with zen.db.transaction() as session:
        rows = {r["queue"]: r for r in Queueing(lowered).summary(PostgresJobTx(session), clock())}
    assert sum(r["borrowed_gpus"] for r in rows.values()) == 2  # team-c lends 2 (it holds 2 of its 4)
    why = _why(zen, lowered, "b3")
    assert "6 GPUs of 4xa100-40gb (quota 4, 2 above it (borrowed, or held since a quota was lowered: the cohort " \
           "holds 2 above its quotas' sum))" in why, why


def test_borrowed_is_what_the_others_leave_unused_shared_out_once():
    assert borrowed({"a": 6, "b": 2}, {"a": 4, "b": 4}) == {"a": 2, "b": 0}  # b lends 2, a borrows them
    assert borrowed({"a": 4, "b": 4}, {"a": 2, "b": 4}) == {"a": 0, "b": 0}  # a above a lowered quota: lent by nobody
    assert borrowed({"a": 4, "b": 6, "c": 2}, {"a": 2, "b": 4, "c": 4}) == {"a": 1, "b": 1, "c": 0}  # 2 lent, shared
    assert sum(borrowed({"a": 5, "b": 5, "c": 1}, {"a": 4, "b": 4, "c": 4}).values()) == 2  # rounding keeps the sum
