"""A lost attempt's success reported after its rerun was claimed (zen.jobs.late_final): the functions, through
functions-framework with Eventarc envelopes, against a real Postgres.

Attempt 1 runs on vm-a; vm-a is cut off from Zen (Pub/Sub unreachable) past the attempt's fence. Its job exits 0
before the fence falls, but the final report cannot be sent; the sweep takes the attempt for lost and vm-b claims
the rerun. Then vm-a's SUCCEEDED gets through. Ignored as stale, the success was dropped without a word (a duplicate,
not even a refusal) and the rerun ran to its end: the job's GPUs billed twice over, and its outcome the rerun's (a
FAILED over a job that succeeded). The job ends SUCCEEDED as attempt 1, once; vm-b is told STOP."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.test_late_final_reports import attempts_used, final, history, job, orders, run_then_go_silent


@pytest.mark.parametrize("rerun", ["ASSIGNED", "RUNNING"])
def test_a_late_success_ends_the_job_once_and_stops_its_rerun(functions, zen, publisher, clock, rerun):
    functions.submit(job_request("job-1"))
    run_then_go_silent(functions, clock, "job-1")
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, attempt=2, vm="vm-b"))
    if rerun == "RUNNING":
        functions.heartbeat(heartbeat("job-1", "RUNNING", 2, attempt=2, vm="vm-b"))
    held = job(zen, "job-1")
    assert (held.status.value, held.attempt, held.vm) == (rerun, 2, "vm-b")
    retries = held.retries

    clock.advance(30)  # vm-a's agent gets through with its final report
    functions.heartbeat(final("job-1"))
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.vm, record.exit_code, record.message) == (
        "SUCCEEDED", 1, "vm-a", 0, "done")
    assert record.retries == retries
    assert orders(publisher, "vm-b")[-1] == ("STOP", 2)
    assert history(zen, "job-1")[-1] == (
        1, rerun, "SUCCEEDED", "attempt 1's final report (SUCCEEDED, exit code 0) arrived after it was taken for lost; "
                               "attempt 2, its rerun on VM vm-b, is stopped: attempt 1's outcome is the job's")
    assert attempts_used(zen, "job-1") == [(1, "vm-a", "SUCCEEDED"), (2, "vm-b", "STOPPED")]

    # vm-b's rerun, until the STOP lands, then its end: told STOP again, and the job's one outcome stays.
    functions.heartbeat(heartbeat("job-1", "RUNNING", 3, attempt=2, vm="vm-b"))
    assert orders(publisher, "vm-b")[-1] == ("STOP", 2)
    functions.heartbeat(heartbeat("job-1", "STOPPED", 4, attempt=2, vm="vm-b", exit_code=-15))
    functions.heartbeat(final("job-1"))  # redelivered
    again = job(zen, "job-1")
    assert (again.status.value, again.attempt, again.vm, again.exit_code) == ("SUCCEEDED", 1, "vm-a", 0)
    assert [row[2] for row in history(zen, "job-1")].count("SUCCEEDED") == 1
    assert attempts_used(zen, "job-1") == [(1, "vm-a", "SUCCEEDED"), (2, "vm-b", "STOPPED")]


def test_a_late_failure_lets_the_rerun_on_a_vm_go_on(functions, zen, publisher, clock):
    """A failure is no outcome to stop a rerun for: the rerun may succeed."""
    functions.submit(job_request("job-1"))
    run_then_go_silent(functions, clock, "job-1")
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, attempt=2, vm="vm-b"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, attempt=2, vm="vm-b"))
    functions.heartbeat(final("job-1", "FAILED", 3))
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.vm) == ("RUNNING", 2, "vm-b")
    assert ("STOP", 2) not in orders(publisher, "vm-b")


def test_a_late_success_ends_the_job_whose_rerun_is_stopping(functions, zen, publisher, clock):
    """The rerun was being stopped (its user's stop) when the success came: the job succeeded, as attempt 1, not
    CANCELLED once the rerun answers, nor run again."""
    functions.submit(job_request("job-1"))
    run_then_go_silent(functions, clock, "job-1")
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, attempt=2, vm="vm-b"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, attempt=2, vm="vm-b"))
    functions.stop({"job_id": "job-1", "reason": "enough"})
    assert job(zen, "job-1").status.value == "STOPPING"

    clock.advance(30)
    functions.heartbeat(final("job-1"))
    functions.heartbeat(heartbeat("job-1", "STOPPED", 3, attempt=2, vm="vm-b", exit_code=-15))
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.vm, record.exit_code) == ("SUCCEEDED", 1, "vm-a", 0)
    assert attempts_used(zen, "job-1") == [(1, "vm-a", "SUCCEEDED"), (2, "vm-b", "STOPPED")]
