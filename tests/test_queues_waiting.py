"""Waiting jobs (PENDING on their queue's quota) through the functions: one that leaves the line
lets the jobs behind it in at once, not at the next tick; and a waiting job is no demand: its
submission runs no scaling pass, and the warm pool's arrival count leaves it out."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from tests.test_queues import CLUSTER, statuses
from tests.test_queues_preemption import a100s, halves_config
from zen.store import fleet, repository


def make(config, db, publisher, clock, queues, scaler=None):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(halves_config(config, queues), db, publisher, clock, scaler=scaler)
    return zen, FunctionsInvoker(zen)


RESEARCH = [{"name": "research", "quota": {CLUSTER: 4}, "users": ["alice"]}]


def test_a_waiting_head_that_is_stopped_lets_the_job_behind_it_in_at_once(config, db, publisher, clock):
    """2 of 4 GPUs held; the head wants 4 and waits, the 2-GPU job behind it waits behind it (no one
    jumps the line). The head stopped, that job fits: admitted by the stop itself, not a minute later."""
    zen, functions = make(config, db, publisher, clock, RESEARCH)
    for job_id, gpus in (("x", 2), ("big", 4), ("small", 2)):
        functions.submit(a100s(job_id, gpus, 0))
        clock.advance(1)
    assert statuses(zen, "x", "big", "small") == ["QUEUED", "PENDING", "PENDING"]

    functions.stop({"job_id": "big"})

    assert statuses(zen, "x", "big", "small") == ["QUEUED", "CANCELLED", "QUEUED"]


def test_a_lenders_waiting_head_that_is_stopped_lets_its_cohort_borrow_again(config, db, publisher, clock):
    """While a lender's own job waits for its lent quota, nobody in the cohort may borrow; that job
    stopped, the borrower's next job is admitted by the stop."""
    cohort = [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["alice"]},
              {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]}]
    zen, functions = make(config, db, publisher, clock, cohort)
    for n in range(3):  # team-b borrows 2 of team-a's 4
        functions.submit({**a100s(f"b{n}", 2, 0), "user_id": "bob"})
        clock.advance(1)
    functions.submit(a100s("a-big", 4, 0))  # team-a's own quota, lent: it waits for it
    clock.advance(1)
    functions.submit({**a100s("b3", 2, 0), "user_id": "bob"})  # would fit the cohort, but team-a waits
    assert statuses(zen, "a-big", "b3") == ["PENDING", "PENDING"]

    functions.stop({"job_id": "a-big"})

    assert statuses(zen, "a-big", "b3") == ["CANCELLED", "QUEUED"]


class CountingScaler:
    """Zen's scaler port, recording the passes asked (the passes themselves are tests/scaling's)."""

    def __init__(self):
        self.passes: list[str] = []

    def covered(self, cluster, regions=None):
        return False

    def racing(self, cluster):
        return True

    def scale(self, cluster, *args, **kwargs):
        self.passes.append(cluster)

    def tick(self):
        return {}


def test_a_submission_left_waiting_runs_no_scaling_pass_and_is_no_arrival(config, db, publisher, clock):
    """A flood of 1,000 waiting jobs ran 1,000 passes (each reading every MIG from Compute), and kept
    idle VMs warm for demand that could not start."""
    scaler = CountingScaler()
    zen, functions = make(config, db, publisher, clock, RESEARCH, scaler)
    since = clock() - timedelta(seconds=1)
    functions.submit(a100s("x", 4, 0))
    for n in range(5):
        clock.advance(1)
        functions.submit(a100s(f"p{n}", 4, 0))
    functions.stop({"job_id": "p4"})

    assert statuses(zen, "x", "p0", "p4") == ["QUEUED", "PENDING", "CANCELLED"]
    assert len(scaler.passes) == 1  # x's, the one admitted
    with zen.db.transaction() as session:
        assert fleet.arrivals_since(session, repository.get_job(session, "x").cluster, since) == 1


def test_an_array_whose_tasks_all_wait_for_quota_runs_no_scaling_pass(config, db, publisher, clock):
    """An array's submission was said admitted where any task was not held by its max_parallel, though its queue
    left every task PENDING: each such array in a flood ran a pass (reading every MIG from Compute) for no demand."""
    scaler = CountingScaler()
    zen, functions = make(config, db, publisher, clock, RESEARCH, scaler)
    functions.submit(a100s("x", 4, 0))
    clock.advance(1)
    functions.submit({**a100s("arr", 4, 0), "array": {"count": 2}})
    assert statuses(zen, "x", "arr-0", "arr-1") == ["QUEUED", "PENDING", "PENDING"]
    assert scaler.passes == [CLUSTER]  # x's, the one admitted
    functions.stop({"job_id": "arr"})
    functions.stop({"job_id": "x"})
    functions.submit({**a100s("more", 2, 0), "array": {"count": 2}})  # both fit the quota: admitted, scaled for
    assert statuses(zen, "more-0", "more-1") == ["QUEUED", "QUEUED"]
    assert scaler.passes == [CLUSTER, CLUSTER]


def test_a_waiting_job_held_elsewhere_for_a_moment_is_not_overtaken(config, db, publisher, clock):
    """Only the head was checked: with p2's row held by another delivery (a late report of a preempted
    attempt, a stop being applied), freeing 4 GPUs admitted p1 and p3, and p2, older, waited on."""
    import threading

    zen, functions = make(config, db, publisher, clock, RESEARCH)
    functions.submit(a100s("r1", 4, 0))
    for job_id in ("p1", "p2", "p3"):
        clock.advance(1)
        functions.submit(a100s(job_id, 2, 0))
    with db.transaction() as session:  # another delivery holds p2's row meanwhile
        session.run("lock_job", job_id="p2")
        stop = threading.Thread(target=lambda: functions.stop({"job_id": "r1"}))
        stop.start()
        stop.join()

    assert statuses(zen, "p1", "p2", "p3") == ["QUEUED", "PENDING", "PENDING"]  # p3 waits behind p2
    zen.on_scale_tick()  # the next pass: p2 first
    assert statuses(zen, "p1", "p2", "p3") == ["QUEUED", "QUEUED", "PENDING"]


def _why(zen, config, job_id):
    from zen.jobs.queueing import Queueing
    from zen.store.jobstore import PostgresJobTx

    with zen.db.transaction() as session:
        return Queueing(config).why_pending(PostgresJobTx(session), repository.get_job(session, job_id))


COHORT_OF_TWO = [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["alice"]},
                 {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]}]


def test_zen_explain_says_what_holds_a_job_back_where_the_numbers_alone_do_not(config, db, publisher, clock):
    """What `zen explain` said of a PENDING job gave room on paper: the borrowing limit that held it was not named
    (nor, below, the lender's job a borrower waits behind); a queue outside any cohort above its lowered quota was
    "borrowing", and a job larger than the lowered quota (which holds nobody up) counted among the jobs ahead."""
    limited = [{**COHORT_OF_TWO[0], "borrowing_limit": {CLUSTER: 2}}, COHORT_OF_TWO[1]]
    zen, functions = make(config, db, publisher, clock, limited)
    for n in range(4):  # 2-GPU jobs: team-a's 4, 2 borrowed, then its borrowing limit
        functions.submit(a100s(f"a{n}", 2, 0))
        clock.advance(1)
    assert statuses(zen, "a2", "a3") == ["QUEUED", "PENDING"]
    assert _why(zen, zen.config, "a3") == (
        f"queue team-a holds 6 GPUs of {CLUSTER} (quota 4, 2 borrowed), the job needs 2, at most 6 with borrowing "
        "(borrowing_limit 2); cohort lab: 6/8 GPUs in use")


def test_zen_explain_names_the_lenders_job_a_borrower_waits_behind(config, db, publisher, clock):
    zen, functions = make(config, db, publisher, clock, COHORT_OF_TWO)
    for n in range(3):  # team-b: its 4 GPUs and 2 of team-a's
        functions.submit({**a100s(f"b{n}", 2, 0), "user_id": "bob"})
        clock.advance(1)
    functions.submit(a100s("a-big", 4, 0))  # within team-a's quota: waits for what team-b borrowed
    clock.advance(1)
    functions.submit({**a100s("b3", 2, 0), "user_id": "bob"})
    assert statuses(zen, "a-big", "b3") == ["PENDING", "PENDING"]
    assert _why(zen, zen.config, "b3") == (
        f"queue team-b holds 6 GPUs of {CLUSTER} (quota 4, 2 borrowed), the job needs 2; cohort lab: 6/8 GPUs in use; "
        "no job borrows while a job of queue team-a (4 GPUs) waits for the quota it lent")


def test_a_lowered_quota_is_not_borrowing_and_a_job_it_strands_is_not_ahead(config, db, publisher, clock):
    queues = [{"name": "solo", "quota": {CLUSTER: 8}, "users": ["alice"]}]
    zen, functions = make(config, db, publisher, clock, queues)
    for job_id, gpus, priority in (("r0", 4, 0), ("r1", 4, 0), ("big", 4, 5), ("small", 2, 0)):
        functions.submit(a100s(job_id, gpus, priority))
        clock.advance(1)
    assert statuses(zen, "big", "small") == ["PENDING", "PENDING"]
    lowered = halves_config(config, [{**queues[0], "quota": {CLUSTER: 3}}])
    assert _why(zen, lowered, "small") == (
        f"queue solo holds 8 GPUs of {CLUSTER} (quota 3, 5 above it: lowered since), the job needs 2")


def test_zen_queues_recent_usage_counts_what_a_queue_holds_without_a_pass(config, db, publisher, clock):
    """Recent usage was brought up to date only by admission passes, which run for queues with jobs waiting: a
    queue holding 4 GPUs for two hours with nothing waiting showed 0."""
    from zen.jobs.queueing import Queueing
    from zen.store.jobstore import PostgresJobTx

    zen, functions = make(config, db, publisher, clock, RESEARCH)
    functions.submit(a100s("a0", 4, 0))
    clock.advance(7200)
    zen.on_scale_tick()
    with zen.db.transaction() as session:
        [row] = Queueing(zen.config).summary(PostgresJobTx(session), clock())
    # 4 GPUs for 2 hours, each second decayed since (a one-hour half-life): 4 x 1 h / ln 2 x (1 - 1/4)
    assert row["recent_gpu_hours"] == pytest.approx(4 / math.log(2) * 0.75, abs=0.01)


def test_usage_brought_forward_at_once_or_pass_by_pass_is_the_same():
    """What a queue held was added at full weight however long the step: 4 GPUs held 10 h in one step weighed
    40 GPU-hours, in minute steps 5.8 (passes run only when a cohort has something to admit, so a queue whose
    long jobs ran while none waited was ranked last by fair sharing)."""
    from zen.jobs.queueing import decay

    at_once, by_minutes = decay(0.0, 36000.0, 4, 3600.0), 0.0
    for _ in range(600):
        by_minutes = decay(by_minutes, 60.0, 4, 3600.0)
    assert at_once == pytest.approx(by_minutes) == pytest.approx(4 * 3600 / math.log(2) * (1 - 0.5 ** 10))
    assert decay(1000.0, 3600.0, 0, 3600.0) == pytest.approx(500.0)
