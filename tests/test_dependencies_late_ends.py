"""Dependencies (zen.core.dependencies) across the ends that come late or twice, through the functions against a real
Postgres: a lost attempt's late success after its rerun was queued, claimed or ran (zen.jobs.late_final), and after
its queue took it back; a late success a spent attempt budget keeps from changing a FAILED; a late failure counted
as a retry. The job waiting for it moves once, as the dependency's one end says."""

from __future__ import annotations

import pytest

from tests.messages import agent_run, heartbeat, job_request
from tests.test_late_final_reports import final, job, run_then_go_silent, starts
from tests.test_queues import CLUSTER, queued_zen, statuses  # noqa: F401 - fixture


def status(zen, *job_ids):
    return [job(zen, job_id).status.value for job_id in job_ids]


@pytest.mark.parametrize("rerun", ["QUEUED", "ASSIGNED", "RUNNING"])
def test_a_late_success_lets_the_waiting_job_go_once(functions, zen, publisher, clock, rerun):
    functions.submit(job_request("prep"))
    functions.submit(job_request("train", after=["prep"]))
    run_then_go_silent(functions, clock, "prep")
    if rerun != "QUEUED":
        functions.heartbeat(heartbeat("prep", "CLAIMED", 1, attempt=2, vm="vm-b"))
    if rerun == "RUNNING":
        functions.heartbeat(heartbeat("prep", "RUNNING", 2, attempt=2, vm="vm-b"))
    assert status(zen, "prep", "train") == [rerun, "PENDING"]
    clock.advance(30)  # vm-a's agent gets through with its final report
    functions.heartbeat(final("prep"))
    assert status(zen, "prep", "train") == ["SUCCEEDED", "QUEUED"]
    # The rerun's own end (it ran on before its STOP landed), the late report again, and the tick: nothing moves.
    functions.heartbeat(heartbeat("prep", "SUCCEEDED", 5, attempt=2, vm="vm-b", exit_code=0))
    functions.heartbeat(final("prep"))
    functions.tick()
    assert status(zen, "prep", "train") == ["SUCCEEDED", "QUEUED"]
    assert starts(publisher, "train") == [1]


def test_a_late_success_after_a_spent_budget_leaves_the_waiting_job_cancelled(functions, zen, clock):
    """The loss ended the job FAILED (its one attempt spent), which cancelled the job waiting for it; the late
    success changes neither (a job ends once)."""
    functions.submit(job_request("prep", max_attempts=1))
    functions.submit(job_request("train", after=["prep"]))
    run_then_go_silent(functions, clock, "prep")
    assert status(zen, "prep", "train") == ["FAILED", "CANCELLED"]
    functions.heartbeat(final("prep"))
    assert status(zen, "prep", "train") == ["FAILED", "CANCELLED"]


def test_a_late_failure_counted_as_a_retry_keeps_the_waiting_job_waiting(functions, zen, clock):
    functions.submit(job_request("prep", max_retries=1, retry_backoff_s=0))
    functions.submit(job_request("train", after=["prep"]))
    run_then_go_silent(functions, clock, "prep")
    functions.heartbeat(final("prep", "FAILED", 2))
    assert status(zen, "prep", "train") == ["QUEUED", "PENDING"]
    assert job(zen, "train").hold == "after: waiting for prep"


@pytest.mark.queues([{"name": "research", "quota": {CLUSTER: 4}, "users": ["alice", "bob"],
                      "preemption": "lower-priority"}])
def test_a_dependency_its_queue_takes_back_is_waited_for_and_its_late_success_lets_the_job_go_once(
        queued_zen, clock, publisher):
    zen, functions = queued_zen
    functions.submit(job_request("prep", priority=0))
    functions.submit(job_request("train", after=["prep"], priority=0))
    functions.heartbeat(heartbeat("prep", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("prep", "RUNNING", 2, vm="vm-a"))
    clock.advance(10)
    functions.submit(job_request("urgent", user_id="bob", priority=9))
    assert statuses(zen, "prep", "train") == ["STOPPING", "PENDING"]
    clock.advance(121)  # the stop goes unanswered: prep waits again as attempt 2
    functions.tick()
    assert statuses(zen, "prep", "train") == ["PENDING", "PENDING"]
    assert job(zen, "train").hold == "after: waiting for prep"
    functions.heartbeat(final("prep"))
    assert statuses(zen, "prep", "train") == ["SUCCEEDED", "PENDING"]
    assert job(zen, "train").hold is None  # in its queue's line now, behind urgent's quota
    for beat in agent_run("urgent", vm="vm-u"):
        functions.heartbeat(beat)
    functions.heartbeat(final("prep"))
    functions.tick()
    assert statuses(zen, "train") == ["QUEUED"]
    assert starts(publisher, "train") == [1]
