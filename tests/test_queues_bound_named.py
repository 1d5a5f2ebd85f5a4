"""A waiting job its queue can no longer ever hold after the configuration changed under it: `zen explain` said
"(its quota was lowered)" where the queue's quota had not changed (its borrowing_limit was lowered, or its cohort
lost a member): the user read `zen queues`, saw the same quota, and had no idea what to ask for. It names what
bounds the queue now."""

from __future__ import annotations

from tests.test_queues import CLUSTER, statuses
from tests.test_queues_preemption import a100s, halves_config
from tests.test_queues_waiting import _why, make

LAB = [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 2}, "users": ["alice"]},
       {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]}]


def _waiting(config, db, publisher, clock):
    """team-b holds its 4 GPUs; alice's 4-GPU job (team-a: quota 2, may borrow 2 of the cohort's 6) waits."""
    zen, functions = make(config, db, publisher, clock, LAB)
    functions.submit({**a100s("b0", 4, 0), "user_id": "bob"})
    clock.advance(1)
    functions.submit({**a100s("a0", 4, 0), "user_id": "alice"})
    assert statuses(zen, "b0", "a0") == ["QUEUED", "PENDING"]
    return zen


def test_a_job_its_queue_can_no_longer_borrow_for_is_told_the_borrowing_limit(config, db, publisher, clock):
    zen = _waiting(config, db, publisher, clock)
    lowered = halves_config(config, [{**LAB[0], "borrowing_limit": {CLUSTER: 0}}, LAB[1]])
    why = _why(zen, lowered, "a0")
    assert "can now hold at most 2" in why, why
    assert "quota was lowered" not in why, why  # team-a's quota is 2, as it was
    assert "borrowing_limit 0" in why, why


def test_a_job_whose_cohort_lost_a_member_is_told_the_cohort(config, db, publisher, clock):
    zen = _waiting(config, db, publisher, clock)
    alone = halves_config(config, [LAB[0], {**LAB[1], "cohort": "other"}])  # team-b moved to another cohort
    why = _why(zen, alone, "a0")
    assert "can now hold at most 2" in why, why
    assert "quota was lowered" not in why, why
    assert "cohort lab's quotas add up to 2" in why, why


def test_a_job_bounded_by_its_quota_and_borrowing_limit_is_told_both(config, db, publisher, clock):
    zen = _waiting(config, db, publisher, clock)
    lowered = halves_config(config, [{**LAB[0], "quota": {CLUSTER: 2}, "borrowing_limit": {CLUSTER: 1}}, LAB[1]])
    why = _why(zen, lowered, "a0")
    assert "can now hold at most 3 (its quota 2 plus borrowing_limit 1)" in why, why
