"""Lent quota comes back to the lender (zen.jobs.queueing.order_admissions): while a head within its queue's
nominal quota waits for quota another queue borrowed, nobody borrows. Through the functions, against
a real Postgres; VMs of CLUSTER run two 2-GPU jobs each (``halves_config``)."""

from __future__ import annotations

import math

import pytest

from tests.messages import job_request
from tests.test_queues import (  # noqa: F401 - fixture
    CLUSTER, COHORT, queued_zen, run_to_end, run_until_running, status, statuses, stop_answer,
)
from tests.test_queues_preemption import a100s, halves_config
from zen.store import repository
from zen.store.jobstore import PostgresJobTx


def lab(preemption_a="never"):
    return [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["alice"], "preemption": preemption_a},
            {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]}]


def functions_for(config, db, publisher, clock, queues):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(halves_config(config, queues), db, publisher, clock)
    return zen, FunctionsInvoker(zen)


def test_a_lenders_big_job_gets_its_quota_back_before_borrowers_small_ones(config, db, publisher, clock):
    """team-b borrows team-a's 4 GPUs with 2-GPU jobs and keeps more waiting; team-a's 4-GPU job is
    within its own quota. Each end freed 2 GPUs, too few for it, and team-b's next job borrowed them:
    team-a's job waited for ever."""
    zen, functions = functions_for(config, db, publisher, clock, lab())
    for n in range(4):  # 8 GPUs: 4 borrowed
        functions.submit({**a100s(f"b{n}", 2, 0), "user_id": "bob"})
        clock.advance(1)
    functions.submit(a100s("a-big", 4, 0))
    clock.advance(1)
    for n in range(4, 8):
        functions.submit({**a100s(f"b{n}", 2, 0), "user_id": "bob"})
        clock.advance(1)
    run_to_end(functions, "b0", "vm-0")
    assert statuses(zen, "a-big", "b4") == ["PENDING", "PENDING"]  # 2 free: kept for a-big
    run_to_end(functions, "b1", "vm-1")
    assert statuses(zen, "a-big", "b4") == ["QUEUED", "PENDING"]


def test_a_reclaim_is_not_undone_and_its_pass_ends(config, db, publisher, clock):
    """With reclaim-borrowed, the 2 GPUs a borrower's end freed went to the borrower's next job while
    the reclaim's victims stopped; then each victim's answer ran passes that swapped two borrowers
    for ever, holding the cohort's lock (the delivery never answered, the tick blocked behind it)."""
    zen, functions = functions_for(config, db, publisher, clock, lab("reclaim-borrowed"))
    for n in range(4):
        functions.submit({**a100s(f"b{n}", 2, 0), "user_id": "bob"})
        clock.advance(1)
        run_until_running(functions, f"b{n}", f"vm-b{n}")
    for n in range(4, 8):
        functions.submit({**a100s(f"b{n}", 2, 0), "user_id": "bob"})
        clock.advance(1)
    functions.submit(a100s("a0", 4, 0))  # within team-a's quota: two borrowers are stopped for it
    clock.advance(1)
    assert statuses(zen, "b2", "b3") == ["STOPPING", "STOPPING"]
    run_to_end(functions, "b0", "vm-b0")
    assert status(zen, "b4") == "PENDING"  # the freed GPUs wait for a0
    functions.heartbeat(stop_answer("b3", "vm-b3"))
    assert status(zen, "a0") == "QUEUED"
    functions.heartbeat(stop_answer("b2", "vm-b2"))
    zen.on_scale_tick()
    assert status(zen, "a0") == "QUEUED"


def test_a_job_a_lowered_quota_can_never_hold_waits_without_holding_up_the_queue(config, db, publisher, clock):
    """The operator lowers a queue's quota below a waiting job's size: that job blocked its queue's
    head for ever, and the smaller jobs behind it never started."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker
    from zen.jobs.queueing import Queueing

    queues = [{"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"]}]
    zen, functions = functions_for(config, db, publisher, clock, queues)
    for job_id in ("r0", "r1"):
        functions.submit(a100s(job_id, 4, 0))
        clock.advance(1)
    functions.submit(a100s("big", 4, 5))  # waits: the quota is full
    clock.advance(1)
    functions.submit(a100s("small", 2, 0))
    clock.advance(1)
    lowered = with_quota(config, queues, 3)
    zen = Zen(lowered, db, publisher, clock)
    functions = FunctionsInvoker(zen)
    for job_id, vm in (("r0", "vm-0"), ("r1", "vm-1")):
        run_to_end(functions, job_id, vm)
    zen.on_scale_tick()
    assert statuses(zen, "big", "small") == ["PENDING", "QUEUED"]
    with db.transaction() as session:
        why = Queueing(lowered).why_pending(PostgresJobTx(session), repository.get_job(session, "big"))
    assert "can now hold at most 3" in why and "quota was lowered" in why


def with_quota(config, queues, gpus):
    return halves_config(config, [{**queues[0], "quota": {CLUSTER: gpus}}])


def test_fair_share_counts_the_gpus_a_job_held_until_it_ended(queued_zen, clock):
    """The pass a job's end runs brought usage up to date with the GPUs held after the end: a 4-GPU
    job that ran an hour alone left its queue's recent usage at 0 (fair sharing ignored long jobs)."""
    from zen.jobs.queueing import Queueing

    zen, functions = queued_zen
    functions.submit(job_request("a0"))
    clock.advance(3600)
    run_to_end(functions, "a0", "vm-0")
    with zen.db.transaction() as session:
        hours = {r["queue"]: r["recent_gpu_hours"] for r in Queueing(zen.config).summary(PostgresJobTx(session), clock())}
    assert hours["team-a"] == pytest.approx(2 / math.log(2), abs=0.01)  # 4 GPUs for an hour, each second decayed


test_fair_share_counts_the_gpus_a_job_held_until_it_ended = pytest.mark.queues(COHORT)(
    test_fair_share_counts_the_gpus_a_job_held_until_it_ended)


@pytest.mark.queues([{"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"]}])
def test_a_head_locked_elsewhere_is_not_jumped(queued_zen, clock):
    """The pass skips rows another transaction holds (it never waits holding the cohort's lock); a head
    held at that moment (a stray heartbeat of it being applied) let the job behind it be admitted."""
    import threading

    zen, functions = queued_zen
    for job_id in ("r0", "r1"):
        functions.submit(job_request(job_id))
        clock.advance(1)
    functions.submit(job_request("head", priority=5))
    clock.advance(1)
    functions.submit(job_request("tail", priority=0))
    held, release = threading.Event(), threading.Event()

    def hold():
        with zen.db.transaction() as session:
            repository.get_job(session, "head", lock=True)
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    run_to_end(functions, "r0", "vm-0")  # frees one job's GPUs while the head is held
    release.set()
    holder.join()
    assert statuses(zen, "head", "tail") == ["PENDING", "PENDING"]
    zen.on_scale_tick()  # the next pass takes the head
    assert statuses(zen, "head", "tail") == ["QUEUED", "PENDING"]
