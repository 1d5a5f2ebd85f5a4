"""Zen down for hours while agents run jobs: the backlog of reports arrives afterwards, shuffled, with old sent_at.
A job whose VM was preempted and which its user stopped during the outage ends CANCELLED whatever order the backlog
comes in."""

from __future__ import annotations

import itertools
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
