"""Preemption (zen.jobs.queueing) in the cases that go beyond one victim at a time: a preemptor that needs
several victims not yet on a VM, a reclaim that must not be taken again by the borrower, and a
user's stop of a job being preempted. Through the functions, against a real Postgres."""

from __future__ import annotations

import json

import pytest

from tests.messages import heartbeat, job_request
from tests.test_queues import (  # noqa: F401 - fixture
    CLUSTER, RECLAIM, attempt_of, borrow_all_and_reclaim, queued_zen, run_until_running, statuses, stop_answer,
    with_queues,
)
from zen.store import repository

# Two jobs share a VM of CLUSTER: a 2-GPU job holds 2 GPUs of the queue's 4.
HALVES = [{"name": "research", "quota": {CLUSTER: 4}, "users": ["alice"], "preemption": "lower-priority"}]


def halves_config(config, queues):
    shared = config.model_copy(update={"clusters": [
        c.model_copy(update={"max_jobs_per_vm": 2}) if c.name == CLUSTER else c for c in config.clusters]})
    return with_queues(shared, queues)


def a100s(job_id, gpus, priority):
    return job_request(job_id, cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=gpus, priority=priority)


@pytest.fixture
def halves_zen(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(halves_config(config, HALVES), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def test_a_preemptor_that_needs_two_queued_victims_takes_both_and_is_admitted(halves_zen, clock):
    """Both victims go back to PENDING at once; the pass after them admits the preemptor (the first
    victim's release used to run a pass of its own that preempted the second, and the submission then
    failed on a stale copy of it, at every redelivery)."""
    zen, functions = halves_zen
    for job_id in ("low1", "low2"):
        functions.submit(a100s(job_id, 2, 0))
        clock.advance(1)
    functions.submit(a100s("urgent", 4, 9))
    assert statuses(zen, "low1", "low2", "urgent") == ["PENDING", "PENDING", "QUEUED"]
    with zen.db.transaction() as session:
        preempted = [e for e in repository.job_history(session, "low1") if e["to_status"] == "PENDING"]
    assert preempted[-1]["reason"].startswith("preempted: a 4-GPU job of queue research")


def test_the_tick_preempts_two_queued_victims_for_a_waiting_job(config, db, publisher, clock):
    """The same preemption found by the tick (preemption turned on while the job waited): the tick
    admits it instead of failing before the scaler runs."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(halves_config(config, [{**HALVES[0], "preemption": "never"}]), db, publisher, clock)
    functions = FunctionsInvoker(zen)
    for job_id, gpus, priority in (("low1", 2, 0), ("low2", 2, 0), ("urgent", 4, 9)):
        functions.submit(a100s(job_id, gpus, priority))
        clock.advance(1)
    assert statuses(zen, "low1", "low2", "urgent") == ["QUEUED", "QUEUED", "PENDING"]
    preempting = Zen(halves_config(config, HALVES), db, publisher, clock)
    assert preempting.on_scale_tick().admitted == 1
    assert statuses(zen, "low1", "low2", "urgent") == ["PENDING", "PENDING", "QUEUED"]


@pytest.mark.queues([{"name": "one", "quota": {CLUSTER: 4}, "users": ["alice"]},
                     {"name": "two", "quota": {CLUSTER: 4}, "users": ["bob"]}])
def test_one_queue_whose_pass_fails_stops_neither_the_other_queues_nor_the_tick(queued_zen, config, db, publisher,
                                                                                   clock):
    from zen.app import Zen

    zen, functions = queued_zen
    for job_id, user in (("a0", "alice"), ("a1", "alice"), ("b0", "bob"), ("b1", "bob")):
        functions.submit(job_request(job_id, user_id=user))
    raised = Zen(with_queues(config, [{"name": "one", "quota": {CLUSTER: 8}, "users": ["alice"]},
                                      {"name": "two", "quota": {CLUSTER: 8}, "users": ["bob"]}]), db, publisher, clock)

    def broken_for_one(key):
        if key == "queue:one":
            raise RuntimeError("a bug in one queue's pass")

    raised.store.hooks.before("queue_lock", broken_for_one)
    assert raised.on_scale_tick().admitted == 1
    assert statuses(zen, "a1", "b1") == ["PENDING", "QUEUED"]


@pytest.mark.queues(RECLAIM)
def test_reclaimed_quota_goes_to_the_reclaiming_job_not_back_to_the_borrower(queued_zen, publisher, clock):
    """team-a borrows 8 GPUs of team-b and has more work waiting at a higher priority; team-b's b1 takes
    back one job's worth: the freed quota is b1's (within its nominal quota, it goes before a head that
    would borrow), so one preemption serves it and no other borrower is stopped."""
    zen, functions = queued_zen
    borrow_all_and_reclaim(functions, clock)
    for n in range(4, 6):
        functions.submit(job_request(f"a{n}", priority=5))
        clock.advance(1)
    assert statuses(zen, "b1", "a3", "a2") == ["PENDING", "STOPPING", "RUNNING"]
    functions.heartbeat(stop_answer("a3", "vm-3"))
    assert statuses(zen, "b1", "a3", "a4", "a2") == ["QUEUED", "PENDING", "PENDING", "RUNNING"]
    zen.on_scale_tick()
    assert statuses(zen, "a2", "a1") == ["RUNNING", "RUNNING"]
    stopped = [json.loads(m.data)["job_id"] for m in publisher.on("zen-vm-control")
               if json.loads(m.data)["action"] == "STOP"]
    assert stopped == ["a3"]  # one preemption only


@pytest.mark.queues(RECLAIM)
def test_a_failure_reported_as_its_queue_preempts_the_job_is_that_preemption(queued_zen, clock):
    """The job's own exit (1) crossed its queue's STOP: its report says FAILED. The preemption came first, and
    its failure may be the stop's own: the job goes back PENDING as the preemption's next attempt (as a gang's
    does, and as a late report after the stop's deadline does), not FAILED for good with its retries unspent."""
    from tests.messages import heartbeat

    zen, functions = queued_zen
    for n in range(4):
        functions.submit(job_request(f"a{n}", max_retries=2))
        clock.advance(1)
        run_until_running(functions, f"a{n}", f"vm-{n}")
    functions.submit(job_request("b1", user_id="bob"))
    assert statuses(zen, "a3", "b1") == ["STOPPING", "PENDING"]
    functions.heartbeat(heartbeat("a3", "FAILED", 5, vm="vm-3", exit_code=1))
    with zen.db.transaction() as session:
        record = repository.get_job(session, "a3")
    assert (record.status.value, record.attempt, record.retries, record.max_attempts) == ("PENDING", 2, 0, 4)
    assert statuses(zen, "b1") == ["QUEUED"]


@pytest.mark.parametrize("limit", ["max_runtime_s", "disk"])
@pytest.mark.queues(RECLAIM)
def test_a_job_killed_at_its_limit_as_its_queue_preempts_it_is_failed_not_rerun(queued_zen, clock, limit):
    """Its agent killed it at its limit a moment before its queue's STOP came: taken for the preemption's
    failure, it went back PENDING to run into the same limit again, another whole max_runtime_s paid."""
    zen, functions = queued_zen
    borrow_all_and_reclaim(functions, clock)  # a3 (on vm-3) is stopped: its queue takes its quota back
    assert statuses(zen, "a3") == ["STOPPING"]
    functions.heartbeat(heartbeat("a3", "FAILED", 5, vm="vm-3", exit_code=143, over_limit=limit))
    assert statuses(zen, "a3") == ["FAILED"] and attempt_of(zen, "a3")[0] == 1


def test_a_head_within_its_nominal_quota_goes_before_one_that_would_borrow():
    """The pure order: a lower-priority job within its queue's nominal quota is admitted before a
    higher-priority one of another queue that would borrow."""
    from types import SimpleNamespace
    from zen.core.config import QueueConfig
    from zen.jobs.queueing import QueueState, order_admissions

    def job(job_id, priority):
        return SimpleNamespace(job_id=job_id, priority=priority, submitted_at=0, gpus=4)

    lender = QueueState(QueueConfig(name="b", cohort="lab", quota={CLUSTER: 8}), 8, 16, 0, 0.0, [job("b1", 0)])
    borrower = QueueState(QueueConfig(name="a", cohort="lab", quota={CLUSTER: 8}), 8, 16, 8, 0.0, [job("a4", 5)])
    admitted = order_admissions([borrower, lender], cohort_used=12, cohort_quota=16)
    assert [j.job_id for _, j, _ in admitted] == ["b1"]


@pytest.mark.queues(RECLAIM)
def test_a_user_stop_during_a_preemption_causes_no_second_preemption(queued_zen, clock):
    """The user's stop wins (a3 ends CANCELLED), and its GPUs still count as on their way back: a pass
    before vm-3 answers (here the tick) preempts nobody else for b1."""
    zen, functions = queued_zen
    borrow_all_and_reclaim(functions, clock)
    functions.stop({"job_id": "a3", "reason": "user wants it gone"})
    with zen.db.transaction() as session:  # the user's stop is in the history, though no status changed
        *_, last = repository.job_history(session, "a3")
    assert (last["actor"], last["to_status"]) == ("user", "STOPPING") and "user wants it gone" in last["reason"]
    clock.advance(5)
    zen.on_scale_tick()
    assert statuses(zen, "a3", "a2", "b1") == ["STOPPING", "RUNNING", "PENDING"]
    functions.heartbeat(stop_answer("a3", "vm-3"))
    assert statuses(zen, "a3", "a2", "b1") == ["CANCELLED", "RUNNING", "QUEUED"]


def test_a_long_line_of_preemptors_is_admitted_in_one_pass_without_nesting(config, db, publisher, clock, monkeypatch):
    """Twelve high-priority jobs behind twelve queued low-priority ones, preemption switched on: the
    tick's pass takes every victim and admits every preemptor, pass after pass in a loop (a pass nested
    in the one before grew the stack by one per preemptor)."""
    from zen.app import Zen
    from zen.jobs.decisions import DecisionWriter
    from zen_dev.local.invoke import FunctionsInvoker

    queues = [{"name": "research", "quota": {CLUSTER: 48}, "users": ["alice"], "preemption": "never"}]
    functions = FunctionsInvoker(Zen(with_queues(config, queues), db, publisher, clock))
    for n in range(12):
        functions.submit(job_request(f"low{n}", priority=0))
        clock.advance(1)
    for n in range(12):
        functions.submit(job_request(f"high{n}", priority=9))
        clock.advance(1)
    depth, deepest = [0], [0]
    admit = DecisionWriter.admit

    def counted(self, *args, **kwargs):
        depth[0] += 1
        deepest[0] = max(deepest[0], depth[0])
        try:
            return admit(self, *args, **kwargs)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(DecisionWriter, "admit", counted)
    zen = Zen(with_queues(config, [{**queues[0], "preemption": "lower-priority"}]), db, publisher, clock)
    zen.on_scale_tick()
    assert set(statuses(zen, *[f"high{n}" for n in range(12)])) == {"QUEUED"}
    assert set(statuses(zen, *[f"low{n}" for n in range(12)])) == {"PENDING"}
    assert deepest[0] == 1


@pytest.mark.queues([{"name": "a", "cohort": "c", "quota": {CLUSTER: 4}, "users": ["alice"]},
                     {"name": "b", "cohort": "c", "quota": {CLUSTER: 4}, "users": ["bob"],
                      "preemption": "reclaim-borrowed"}])
def test_reclaim_borrowed_takes_back_quota_a_gang_borrowed(queued_zen, clock):
    """Queue a (nominal 4 GPUs) runs a 2-node gang of 8 GPUs, 4 borrowed from b. b's 4-GPU job fits b's
    nominal quota, yet nothing was taken back (a victim had to be no larger than what its queue borrowed:
    8 > 4) and it waited as long as the gang ran; as Kueue does, a queue above its nominal gives back jobs."""
    zen, fn = queued_zen
    fn.submit(job_request("a1", nodes=2))
    clock.advance(1)
    assert statuses(zen, "a1") == ["QUEUED"]
    fn.submit(job_request("b1", user_id="bob"))
    assert statuses(zen, "a1", "b1") == ["PENDING", "QUEUED"]


@pytest.mark.queues(RECLAIM)
def test_a_preempted_job_whose_vm_still_says_it_runs_is_not_rerun_beside_it(queued_zen, clock):
    """vm-3 never hears the STOP (its orders lost, its reports not) and keeps reporting the attempt RUNNING: it
    was rerun preempted_stop_s after the STOP all the same, and the next attempt could run beside it. It waits
    while the VM says it runs, and is rerun once the VM is quiet that long (its fence ended it)."""
    zen, functions = queued_zen
    borrow_all_and_reclaim(functions, clock)
    assert statuses(zen, "a3") == ["STOPPING"]
    waits = zen.config.deadlines.preempted_stop_s
    for seq in range(10, 10 + int(waits // 30) + 2):
        clock.advance(30)
        functions.heartbeat(heartbeat("a3", "RUNNING", seq, vm="vm-3"))
        zen.on_scale_tick()
    assert statuses(zen, "a3", "b1") == ["STOPPING", "PENDING"] and attempt_of(zen, "a3")[0] == 1
    for _ in range(int(waits // 30) + 1):  # quiet since (ticks half a minute apart: no gap in them)
        clock.advance(30)
        zen.on_scale_tick()
    assert statuses(zen, "a3", "b1") == ["PENDING", "QUEUED"] and attempt_of(zen, "a3")[0] == 2


LENDER_WAITS = [
    {"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["alice"], "preemption": "lower-priority"},
    {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]}]


@pytest.mark.queues(LENDER_WAITS)
def test_no_head_preempts_to_borrow_while_a_lenders_head_waits(queued_zen, clock):
    """team-a runs r1 on its quota and r2 on team-b's; team-b's s1 waits for what it lent. team-a's urgent
    could only run by borrowing: it preempted r2 (the lender's head, never read in a full cohort, was not
    seen), r2's 4 GPUs went to s1, and urgent then preempted r1 too: two jobs stopped for nothing."""
    zen, functions = queued_zen
    for n in (1, 2):
        functions.submit(job_request(f"r{n}"))
        clock.advance(1)
        run_until_running(functions, f"r{n}", f"vm-{n}")
    functions.submit(job_request("s1", user_id="bob"))
    clock.advance(1)
    functions.submit(job_request("urgent", priority=9))
    clock.advance(1)
    functions.tick()
    assert statuses(zen, "r1", "r2", "s1", "urgent") == ["RUNNING", "RUNNING", "PENDING", "PENDING"]


LAB = [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["alice"], "preemption": "lower-priority"},
       {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]},
       {"name": "team-d", "cohort": "lab", "quota": {CLUSTER: 2}, "users": ["dave"]}]


def _lab_full_with_a_waiting_head(config, db, publisher, clock, head_gpus: int):
    """team-a (lower-priority) and team-b (never) lend to team-d, which borrows all of it; team-a's v1 (priority 0)
    takes the cohort's last 2 GPUs; team-b's c1 (priority 5, within its quota) waits; team-a's p1 (priority 3,
    within its quota) comes."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(halves_config(config, LAB), db, publisher, clock)
    functions = FunctionsInvoker(zen)
    for n in range(4):  # team-d: its own 2 GPUs and 6 borrowed
        functions.submit({**a100s(f"d{n}", 2, 0), "user_id": "dave"})
        clock.advance(1)
    for job in (a100s("v1", 2, 0), {**a100s("c1", head_gpus, 5), "user_id": "bob"}, a100s("p1", 2, 3)):
        functions.submit(job)
        clock.advance(1)
    return zen, functions


def test_a_job_is_not_preempted_for_quota_another_queues_head_takes(config, db, publisher, clock):
    """p1 preempted v1, and the next pass gave the 2 GPUs v1 freed to c1, which sorts first: v1 stopped for
    nothing, p1 still waiting. No preemption goes now whose freed GPUs a head ahead of the preemptor would take:
    v1 runs on and p1 waits its turn."""
    zen, functions = _lab_full_with_a_waiting_head(config, db, publisher, clock, 2)
    assert statuses(zen, "v1", "c1", "p1") == ["QUEUED", "PENDING", "PENDING"]
    with zen.db.transaction() as session:
        assert [e["to_status"] for e in repository.job_history(session, "v1")][-1] == "QUEUED"
    functions.submit({**a100s("d9", 2, 0), "user_id": "dave"})  # another pass: still nothing to preempt
    assert statuses(zen, "v1", "c1", "p1") == ["QUEUED", "PENDING", "PENDING"]


def test_a_preemption_a_waiting_head_ahead_could_not_use_still_goes(config, db, publisher, clock):
    """As above, but c1 needs 4 GPUs: the 2 that v1 frees cannot admit it, so p1 takes them (a first version of
    the rule above let no head behind a waiting one preempt: p1 waited for jobs to end)."""
    zen, _ = _lab_full_with_a_waiting_head(config, db, publisher, clock, 4)
    assert statuses(zen, "v1", "c1", "p1") == ["PENDING", "PENDING", "QUEUED"]
