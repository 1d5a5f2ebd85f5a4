"""A lost attempt's final report that arrives after the sweep gave the attempt up (zen.jobs.late_final):
the functions, through functions-framework with Eventarc envelopes, against a real Postgres.

The bug these pin down: attempt 1 runs on vm-a; vm-a's heartbeats stop reaching Zen (a partition, or
an agent killed and restarted after the job exited); after ``heartbeat_timeout_s`` the sweep takes
the attempt for lost and requeues the job as attempt 2. Then vm-a's final report for attempt 1 comes
(the agent retries it for up to 300 s). It was ignored as stale, and a job that had succeeded (or had
failed on its own, which Zen never retries) ran again."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.messages import heartbeat, job_request
from tests.test_queues import CLUSTER, queued_zen, statuses  # noqa: F401 - fixture
from zen.store import repository, usage


def job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def history(zen, job_id):
    with zen.db.transaction() as session:
        return [(r["attempt"], r["from_status"], r["to_status"], r["reason"])
                for r in repository.job_history(session, job_id)]


def orders(publisher, vm):
    return [(json.loads(m.data)["action"], json.loads(m.data)["attempt"]) for m in publisher.on("zen-vm-control")
            if m.attributes["vm"] == vm]


def starts(publisher, job_id):
    return [json.loads(m.data)["attempt"] for m in publisher.on("zen-job-start") if m.attributes["job_id"] == job_id]


def attempts_used(zen, job_id):
    with zen.db.transaction() as session:
        return [(row["attempt"], row["vm"], row["outcome"]) for row in usage.attempts_of_job(session, job_id)]


def rejections(zen):
    with zen.db.transaction() as session:
        return [row["reason"] for row in repository.list_rejections(session)]


def run_then_go_silent(functions, clock, *job_ids, vm="vm-a"):
    """Attempt 1 of each job is claimed and runs on ``vm``, which then goes silent: the sweep takes it for
    lost (requeued as attempt 2, or FAILED with a budget of one attempt)."""
    for job_id in job_ids:
        functions.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=vm))
        functions.heartbeat(heartbeat(job_id, "RUNNING", 2, vm=vm))
    clock.advance(60)
    functions.tick()
    clock.advance(121)
    functions.tick()


def final(job_id, status="SUCCEEDED", exit_code=0, *, attempt=1, vm="vm-a", seq=3, **extra):
    return heartbeat(job_id, status, seq, attempt=attempt, vm=vm, exit_code=exit_code, message="done", **extra)


def test_a_success_reported_after_the_sweep_took_the_attempt_for_lost_ends_the_job_instead_of_running_it_again(
        functions, zen, publisher, clock):
    functions.submit(job_request("job-1"))
    run_then_go_silent(functions, clock, "job-1")
    lost = job(zen, "job-1")
    assert (lost.status.value, lost.attempt, lost.vm) == ("QUEUED", 2, None)
    assert starts(publisher, "job-1") == [1, 2]

    clock.advance(30)  # vm-a's agent gets through with its final report
    functions.heartbeat(final("job-1"))
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.vm, record.exit_code, record.message) == (
        "SUCCEEDED", 1, "vm-a", 0, "done")
    assert record.finished_at == clock() and record.started_at is not None and record.zone == "us-central1-a"
    *_, lost_row, requeue, ended = history(zen, "job-1")
    assert lost_row[:3] == (1, "RUNNING", "LOST") and requeue[:3] == (2, "LOST", "QUEUED")
    assert ended == (1, "QUEUED", "SUCCEEDED", "attempt 1's final report (SUCCEEDED, exit code 0) arrived after "
                                               "it was taken for lost; attempt 2 never started")
    [event] = [json.loads(m.data) for m in publisher.on("zen-job-events")
               if json.loads(m.data).get("to_status") == "SUCCEEDED"]
    assert (event["type"], event["attempt"], event["from_status"], event["vm"], event["exit_code"]) == (
        "job.status_changed", 1, "QUEUED", "vm-a", 0)
    assert attempts_used(zen, "job-1") == [(1, "vm-a", "SUCCEEDED")]  # attempt 2 held no VM

    # Attempt 2's start is still out there: whoever claims it is told RELEASE, and nothing runs.
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, attempt=2, vm="vm-b"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, attempt=2, vm="vm-c"))  # one that ran it anyway
    assert orders(publisher, "vm-b") == [("RELEASE", 2)]
    assert orders(publisher, "vm-c") == [("STOP", 2)]
    # The report redelivered, and the VM that ran attempt 1 pulling attempt 2's start: nothing changes.
    functions.heartbeat(final("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 4, attempt=2, vm="vm-a"))
    assert orders(publisher, "vm-a")[-1] == ("RELEASE", 2)
    again = job(zen, "job-1")
    assert (again.status.value, again.attempt, again.vm, again.last_seq) == ("SUCCEEDED", 1, "vm-a", 3)
    assert [row[2] for row in history(zen, "job-1")][-1] == "SUCCEEDED" and len(history(zen, "job-1")) == 7
    assert starts(publisher, "job-1") == [1, 2] and attempts_used(zen, "job-1") == [(1, "vm-a", "SUCCEEDED")]
    clock.advance(zen.config.deadlines.start_republish_s + 1)
    functions.tick()
    assert starts(publisher, "job-1") == [1, 2]  # not republished: the job is over


def test_a_failure_of_the_job_itself_reported_late_ends_it_failed_instead_of_retrying_it(
        functions, zen, publisher, clock):
    functions.submit(job_request("job-1"))
    run_then_go_silent(functions, clock, "job-1")
    functions.heartbeat(final("job-1", "FAILED", 3))
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.exit_code) == ("FAILED", 1, 3)
    assert history(zen, "job-1")[-1][1:] == ("QUEUED", "FAILED", "attempt 1's final report (FAILED, exit code 3) "
                                                                 "arrived after it was taken for lost; attempt 2 "
                                                                 "never started")
    assert attempts_used(zen, "job-1") == [(1, "vm-a", "FAILED")]


def test_only_the_final_report_of_the_lost_attempt_from_its_vm_counts_and_only_while_nothing_runs_since(
        functions, zen, publisher, clock):
    """Everything else stays stale: another VM's final report, a STOPPED (the sweep's STOP reached the
    job), a failure of an attempt whose successor a VM claimed (the rerun goes on: a success stops it,
    tests/test_late_success_stops_rerun.py), an attempt the VM itself said was preempted (not the sweep's
    loss). The lost attempt's own report still ends its job."""
    for job_id in ("lost", "claimed", "preempted"):
        functions.submit(job_request(job_id))
    run_then_go_silent(functions, clock, "lost", "claimed")
    functions.heartbeat(heartbeat("preempted", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("preempted", "PREEMPTED", 2, vm="vm-a"))  # requeued by its VM's word
    functions.heartbeat(heartbeat("claimed", "CLAIMED", 1, attempt=2, vm="vm-b"))  # the rerun is claimed

    functions.heartbeat(final("lost", vm="vm-x"))  # not the VM that held attempt 1
    functions.heartbeat(final("lost", "STOPPED", -15))
    functions.heartbeat(final("claimed", "FAILED", 3))
    functions.heartbeat(final("preempted"))
    assert [(j.status.value, j.attempt) for j in (job(zen, "lost"), job(zen, "claimed"), job(zen, "preempted"))] == [
        ("QUEUED", 2), ("ASSIGNED", 2), ("QUEUED", 2)]
    assert attempts_used(zen, "lost") == [(1, "vm-a", "LOST")]

    functions.heartbeat(final("lost", seq=4))
    assert (job(zen, "lost").status.value, job(zen, "lost").attempt) == ("SUCCEEDED", 1)
    assert job(zen, "claimed").status.value == "ASSIGNED"  # and vm-b's run of attempt 2 goes on
    assert [a for a, _ in orders(publisher, "vm-b") if _ == 2] == ["CONFIRM"]


def test_a_claim_of_the_next_attempt_waiting_on_the_row_lock_is_refused_once_the_late_report_ends_the_job(
        functions, zen, publisher, clock):
    """The report and a claim of attempt 2 are ordered by the job's row lock: the claim that waited
    for it finds a job that is over and is told RELEASE."""
    functions.submit(job_request("job-1"))
    run_then_go_silent(functions, clock, "job-1")
    claimer = []

    def read_while_a_claim_waits(job_id, attempt):
        claimer.append(threading.Thread(target=functions.heartbeat,
                                        args=(heartbeat("job-1", "CLAIMED", 1, attempt=2, vm="vm-b"),)))
        claimer[0].start()
        time.sleep(0.5)  # the claim is now waiting for the row this transaction holds

    zen.store.hooks.before("lost_attempt", read_while_a_claim_waits)
    functions.heartbeat(final("job-1"))
    claimer[0].join(30)
    assert not claimer[0].is_alive()
    assert (job(zen, "job-1").status.value, job(zen, "job-1").attempt) == ("SUCCEEDED", 1)
    assert orders(publisher, "vm-b") == [("RELEASE", 2)]


def test_a_job_the_sweep_failed_for_a_spent_budget_stays_failed_and_the_late_report_says_why(
        functions, zen, publisher, clock):
    """Not undone: FAILED is terminal and announced (``zen submit --wait`` returned, the quota went to
    the next job), and a job ends once. The report is ignored with a reason that says what it was."""
    functions.submit(job_request("job-1", max_attempts=1))
    run_then_go_silent(functions, clock, "job-1")
    assert (job(zen, "job-1").status.value, job(zen, "job-1").attempt) == ("FAILED", 1)
    functions.heartbeat(final("job-1"))
    record = job(zen, "job-1")
    assert (record.status.value, record.exit_code) == ("FAILED", None)
    assert rejections(zen)[-1] == ("attempt 1's final report (SUCCEEDED, exit code 0) arrived after it was taken "
                                   "for lost, which spent the attempt budget: the job stays FAILED (a job that is "
                                   "over is not changed; submit it again to run it)")
    assert attempts_used(zen, "job-1") == [(1, "vm-a", "LOST")]


@pytest.mark.queues([{"name": "research", "quota": {CLUSTER: 4}, "users": ["alice", "bob"]}])
def test_a_late_success_gives_the_quota_the_requeued_attempt_held_to_the_next_job(queued_zen, publisher, clock):
    zen, functions = queued_zen
    functions.submit(job_request("low"))
    run_then_go_silent(functions, clock, "low")
    functions.submit(job_request("next", user_id="bob"))
    assert statuses(zen, "low", "next") == ["QUEUED", "PENDING"]  # attempt 2 holds the queue's 4 GPUs
    functions.heartbeat(final("low"))
    assert statuses(zen, "low", "next") == ["SUCCEEDED", "QUEUED"]  # admitted in the same delivery
    assert starts(publisher, "next") == [1]


@pytest.mark.queues([{"name": "research", "quota": {CLUSTER: 4}, "users": ["alice", "bob"],
                      "preemption": "lower-priority"}])
def test_a_late_report_ends_the_job_even_after_its_queue_took_the_requeued_attempt_back(queued_zen, clock):
    """Attempt 2 waited QUEUED and a queue took its quota back (PENDING as attempt 3): neither ever
    started, so attempt 1's report still ends the job."""
    zen, functions = queued_zen
    functions.submit(job_request("low"))
    run_then_go_silent(functions, clock, "low")
    functions.submit(job_request("urgent", user_id="bob", priority=9))
    assert statuses(zen, "low", "urgent") == ["PENDING", "QUEUED"]
    assert job(zen, "low").attempt == 3

    functions.heartbeat(final("low"))
    record = job(zen, "low")
    assert (record.status.value, record.attempt) == ("SUCCEEDED", 1)
    assert history(zen, "low")[-1][1:] == ("PENDING", "SUCCEEDED", "attempt 1's final report (SUCCEEDED, exit code "
                                                                   "0) arrived after it was taken for lost; attempts "
                                                                   "2-3 never started")
    assert attempts_used(zen, "low") == [(1, "vm-a", "SUCCEEDED")]


def test_a_late_failure_that_its_retries_would_retry_lets_the_queued_rerun_go_as_that_retry(functions, zen, clock):
    """The job asked for retries; attempt 1's FAILED came after the sweep requeued attempt 2. It ended the job
    FAILED for good (the rule is for failures Zen never retries): the user's retries dropped, the rerun
    cancelled. The rerun queued already now goes ahead as the retry, counted."""
    functions.submit(job_request("job-r", max_retries=2, retry_backoff_s=0))
    run_then_go_silent(functions, clock, "job-r")
    functions.heartbeat(final("job-r", "FAILED", 3))
    record = job(zen, "job-r")
    assert (record.status.value, record.attempt, record.retries) == ("QUEUED", 2, 1)
    assert history(zen, "job-r")[-1][3] == ("attempt 1's final report (FAILED, exit code 3) arrived after it was "
                                            "taken for lost; it earns retry 1 of 2: attempt 2, queued already, is "
                                            "that retry")
    functions.heartbeat(final("job-r", "FAILED", 3))  # a redelivery counts nothing more
    assert job(zen, "job-r").retries == 1


@pytest.mark.queues([{"name": "research", "quota": {CLUSTER: 4}, "users": ["alice", "bob"],
                      "preemption": "lower-priority"}])
@pytest.mark.parametrize("outcome", ["SUCCEEDED", "FAILED", "max_runtime_s"])
def test_a_success_reported_after_a_preemptions_stop_went_unanswered_ends_the_job(queued_zen, clock, outcome):
    """low exits 0 on vm-a; before its SUCCEEDED gets through, urgent's queue takes low back (STOPPING), the
    stop goes unanswered past stop_timeout_s and the sweep sends low back to PENDING as attempt 2. The report
    was dropped as stale and the job that had succeeded ran again once quota freed. A failure (maybe the
    stop's own SIGTERM) is rerun, as the preemption would have; a kill at the job's max_runtime_s ends it
    FAILED, as it would have without the preemption (it was rerun, into the same limit)."""
    zen, functions = queued_zen
    functions.submit(job_request("low", priority=0))
    functions.heartbeat(heartbeat("low", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("low", "RUNNING", 2, vm="vm-a"))
    clock.advance(10)
    functions.submit(job_request("urgent", user_id="bob", priority=9))
    assert job(zen, "low").status.value == "STOPPING"
    clock.advance(121)
    functions.tick()
    assert (job(zen, "low").status.value, job(zen, "low").attempt) == ("PENDING", 2)

    limit = {"over_limit": outcome} if outcome == "max_runtime_s" else {}
    functions.heartbeat(final("low", "SUCCEEDED" if outcome == "SUCCEEDED" else "FAILED",
                              0 if outcome == "SUCCEEDED" else 143, **limit))
    record = job(zen, "low")
    if outcome == "FAILED":
        assert (record.status.value, record.attempt) == ("PENDING", 2)
        return
    if limit:
        assert (record.status.value, record.attempt, record.exit_code) == ("FAILED", 1, 143)
        return
    assert (record.status.value, record.attempt, record.exit_code) == ("SUCCEEDED", 1, 0)
    assert history(zen, "low")[-1][3] == ("attempt 1's final report (SUCCEEDED, exit code 0) arrived after its queue "
                                          "took it back and it did not answer the stop in time; attempt 2 never "
                                          "started")
    assert attempts_used(zen, "low") == [(1, "vm-a", "SUCCEEDED")]


def test_a_late_failure_counted_as_a_retry_does_not_spend_the_attempt_budget(functions, zen, clock):
    """A retry spends no attempt budget (zen.core.retries; the in-time path raises max_attempts by one): a late
    FAILED counted as a retry left max_attempts as the loss left it, and the one real loss that followed
    ended the job "attempt budget spent"."""
    functions.submit(job_request("job-b", max_attempts=2, max_retries=2, retry_backoff_s=0))
    run_then_go_silent(functions, clock, "job-b")  # attempt 1 lost: attempt 2 QUEUED (1 of 2 attempts spent)
    functions.heartbeat(final("job-b", "FAILED", 3))  # ... it had failed: retry 1, attempt 2 is that retry
    record = job(zen, "job-b")
    assert (record.status.value, record.attempt, record.retries) == ("QUEUED", 2, 1)
    # Attempt 2 (the retry) is lost in turn: one loss, one retried failure; the budget of 2 is not spent.
    functions.heartbeat(heartbeat("job-b", "CLAIMED", 1, attempt=2, vm="vm-b"))
    functions.heartbeat(heartbeat("job-b", "RUNNING", 2, attempt=2, vm="vm-b"))
    clock.advance(60)
    functions.tick()
    clock.advance(121)
    functions.tick()
    record = job(zen, "job-b")
    assert (record.status.value, record.attempt) == ("QUEUED", 3), (record.status, record.message)
