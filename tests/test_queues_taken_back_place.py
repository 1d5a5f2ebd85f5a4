"""A job its queue takes back (``preemption: lower-priority``) and a late success that ends a job whose rerun runs,
through the functions against a real Postgres: what Kueue's users expect of a preempted workload (requeued at its
place, its priority kept, never taken back by a job of equal priority) and when the quota comes back."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.test_late_final_reports import final, run_then_go_silent
from tests.test_queues import (  # noqa: F401 - fixture
    CLUSTER, attempt_of, queued_zen, run_until_running, statuses, stop_answer,
)

LOWER = [{"name": "research", "quota": {CLUSTER: 4}, "users": ["alice", "bob"], "preemption": "lower-priority"}]


@pytest.mark.queues(LOWER)
def test_a_job_taken_back_keeps_its_place_and_no_equal_priority_takes_it(queued_zen, clock):
    zen, functions = queued_zen
    functions.submit(job_request("first", priority=5))
    clock.advance(1)
    run_until_running(functions, "first", "vm-a")
    functions.submit(job_request("same", priority=5))  # equal priority: waits, takes nothing
    clock.advance(1)
    functions.submit(job_request("low", priority=0))
    clock.advance(1)
    assert statuses(zen, "first", "same", "low") == ["RUNNING", "PENDING", "PENDING"]

    functions.submit(job_request("urgent", user_id="bob", priority=9))
    assert statuses(zen, "first", "urgent") == ["STOPPING", "PENDING"]
    functions.heartbeat(stop_answer("first", "vm-a"))
    assert statuses(zen, "first", "urgent") == ["PENDING", "QUEUED"]
    assert attempt_of(zen, "first") == (2, 4, 1)  # a new attempt, its budget raised (3 -> 4), not spent

    run_until_running(functions, "urgent", "vm-u")
    functions.heartbeat(heartbeat("urgent", "SUCCEEDED", 4, vm="vm-u", exit_code=0))
    # first goes back in at its place: ahead of same (submitted after it) and of low
    assert statuses(zen, "first", "same", "low") == ["QUEUED", "PENDING", "PENDING"]


@pytest.mark.queues([{"name": "research", "quota": {CLUSTER: 4}, "users": ["alice", "bob"]}])
def test_a_late_success_over_a_running_rerun_gives_the_quota_on_once(queued_zen, clock):
    """The job ends (as attempt 1) while its rerun still runs on vm-b, told STOP: its quota goes to the next job at
    once, and the rerun's STOPPED changes nothing more (no second release)."""
    zen, functions = queued_zen
    functions.submit(job_request("low"))
    run_then_go_silent(functions, clock, "low")
    functions.heartbeat(heartbeat("low", "CLAIMED", 1, attempt=2, vm="vm-b"))
    functions.heartbeat(heartbeat("low", "RUNNING", 2, attempt=2, vm="vm-b"))
    functions.submit(job_request("next", user_id="bob"))
    clock.advance(1)
    functions.submit(job_request("after", user_id="bob"))
    assert statuses(zen, "low", "next", "after") == ["RUNNING", "PENDING", "PENDING"]

    functions.heartbeat(final("low"))
    assert statuses(zen, "low", "next", "after") == ["SUCCEEDED", "QUEUED", "PENDING"]
    functions.heartbeat(heartbeat("low", "STOPPED", 3, attempt=2, vm="vm-b", exit_code=-15))
    assert statuses(zen, "low", "next", "after") == ["SUCCEEDED", "QUEUED", "PENDING"]
