"""Zen down for hours while agents run jobs: the backlog of reports arrives afterwards, shuffled, with old sent_at.
A job that ended early in the outage ends when its final report says (held between its run's start and now, as its
start is), and its attempt is billed to then: it was billed to when Zen came back (9x its GPU-seconds here)."""

from __future__ import annotations

import itertools
import json
import random
from datetime import timedelta

import pytest

from tests.messages import job_request
from zen.store import repository


def beat(job_id, status, seq, at, *, attempt=1, vm="vm-a", **extra):
    return {"job_id": job_id, "attempt": attempt, "vm": vm, "region": "us-central1", "zone": "us-central1-a",
            "status": status, "seq": seq, "sent_at": at.isoformat(), **extra}


def _job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def _usage(zen, job_id):
    from zen.store import usage

    with zen.db.transaction() as session:
        return [(r["attempt"], r["started_at"], r["ended_at"], r["gpu_seconds"], r["outcome"])
                for r in usage.attempts_of_job(session, job_id)]


def test_a_job_that_ended_early_in_an_outage_is_billed_to_its_end(zen, functions, clock, db_url):
    fn = functions
    for _ in range(5):
        fn.tick()
        clock.advance(60)
    fn.submit(job_request("a"))
    fn.heartbeat(beat("a", "CLAIMED", 1, clock()))
    fn.heartbeat(beat("a", "RUNNING", 2, clock()))
    ran_from = clock()
    clock.advance(600)  # ten minutes of work, heard
    fn.heartbeat(beat("a", "RUNNING", 3, clock()))
    fn.tick()
    # Zen goes down; five minutes later the job succeeds; Zen is back after two hours
    ended = clock.advance(300)
    backlog = [beat("a", "RUNNING", 4, ended - timedelta(seconds=200)),
               beat("a", "SUCCEEDED", 5, ended, exit_code=0, message="done")]
    clock.advance(2 * 3600)
    random.Random(1).shuffle(backlog)
    for b in backlog:
        fn.heartbeat(b)
    fn.tick()
    job = _job(zen, "a")
    assert job.status.value == "SUCCEEDED"
    usage = _usage(zen, "a")
    [(_, started, usage_end, gpu_seconds, outcome)] = usage
    assert job.finished_at <= ended + timedelta(seconds=60), (job.finished_at, ended)
    assert gpu_seconds <= 4 * (ended - ran_from).total_seconds() + 4 * 60, (gpu_seconds, usage_end)



@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_preempted_and_stopped_during_outage_ends_cancelled_whatever_the_order(zen, functions, clock, publisher, order):
    """Attempt 1 runs on vm-a; during an outage its VM is preempted and the user stops the job; also vm-b's
    claim of nothing. After: the messages in any order, ticks between: the job ends CANCELLED, no attempt 2 runs."""
    fn = functions
    for _ in range(5):
        fn.tick()
        clock.advance(60)
    fn.submit(job_request("p"))
    fn.heartbeat(beat("p", "CLAIMED", 1, clock()))
    fn.heartbeat(beat("p", "RUNNING", 2, clock()))
    fn.tick()
    t_pre = clock.advance(100)
    t_stop = clock.advance(100)
    clock.advance(3600)
    steps = [lambda: fn.heartbeat(beat("p", "RUNNING", 3, t_pre - timedelta(seconds=20))),
             lambda: fn.heartbeat(beat("p", "PREEMPTED", 4, t_pre, exit_code=143)),
             lambda: fn.stop({"job_id": "p", "reason": "not needed"})]
    fn.tick()
    for i in order:
        steps[i]()
        clock.advance(5)
    for _ in range(4):
        clock.advance(60)
        fn.tick()
    job = _job(zen, "p")
    assert job.status.value == "CANCELLED", (order, job.status)
