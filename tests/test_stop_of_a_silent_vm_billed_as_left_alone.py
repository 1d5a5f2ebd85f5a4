"""A user who stops a job whose VM is already dead pays no more than one who leaves it: two alike jobs whose VMs go
silent at the same moment, one stopped 100 s into the silence. The one left alone is LOST one
``heartbeat_timeout_s`` after its last report (and up to a tick); the stopped one is CANCELLED ``stop_timeout_s``
after the stop, as before (Zen waits that long for the VM's answer), but its usage ends by its VM's last report +
``heartbeat_timeout_s``, not when the sweep gave the stop up. A VM that answers its stop is billed until its
answer; one heard after the stop, until that report + ``heartbeat_timeout_s`` at the latest."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from zen.store import usage

TICK_S = 10


def billed(zen, job_id: str) -> tuple[str, datetime, datetime]:
    """The outcome of the job's only attempt, and when its usage starts and ends."""
    with zen.db.transaction() as session:
        [row] = usage.attempts_of_job(session, job_id)
    return row["outcome"], row["started_at"], row["ended_at"]


def running(functions, clock, job_id: str, vm: str) -> None:
    functions.submit(job_request(job_id))
    functions.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=vm))
    functions.heartbeat(heartbeat(job_id, "RUNNING", 2, vm=vm))


def ticks_until_over(functions, zen, clock, *job_ids: str) -> None:
    for _ in range(100):
        if all(job(zen, job_id).status.value not in ("RUNNING", "STOPPING") for job_id in job_ids):
            return
        clock.advance(TICK_S)
        functions.tick()
    raise AssertionError([job(zen, job_id).status.value for job_id in job_ids])


def test_stopping_a_job_whose_vm_is_dead_costs_no_more_than_leaving_it(functions, zen, clock):
    functions.tick()
    running(functions, clock, "left", "vm-1")
    running(functions, clock, "stopped", "vm-2")
    silent_from = clock()  # both VMs die: no report of either comes again
    clock.advance(100)
    functions.tick()
    functions.stop({"job_id": "stopped", "reason": "looks hung"})
    stop_at = clock()
    ticks_until_over(functions, zen, clock, "left", "stopped")

    left, stopped = job(zen, "left"), job(zen, "stopped")
    assert (left.status.value, stopped.status.value) == ("QUEUED", "CANCELLED")
    assert stopped.finished_at is not None and stopped.finished_at >= stop_at + timedelta(seconds=120), (
        "the stop still waits stop_timeout_s for the VM's answer")
    outcome_left, from_left, to_left = billed(zen, "left")
    outcome_stopped, from_stopped, to_stopped = billed(zen, "stopped")
    assert (outcome_left, outcome_stopped) == ("LOST", "STOPPED")
    left_s, stopped_s = (to_left - from_left).total_seconds(), (to_stopped - from_stopped).total_seconds()
    assert stopped_s <= left_s, f"stopped billed {stopped_s:g} s, left alone {left_s:g} s"
    assert to_stopped == silent_from + timedelta(seconds=120), (to_stopped - silent_from).total_seconds()


def test_a_vm_that_answers_its_stop_is_billed_until_its_answer(functions, zen, clock):
    functions.tick()
    running(functions, clock, "answered", "vm-3")
    clock.advance(100)
    functions.tick()
    functions.stop({"job_id": "answered", "reason": "done with it"})
    clock.advance(110)  # its answer comes 210 s after its last report, within the stop's timeout
    functions.heartbeat(heartbeat("answered", "STOPPED", 3, vm="vm-3", exit_code=143))
    answered = clock()
    assert job(zen, "answered").status.value == "CANCELLED"
    assert billed(zen, "answered")[2] == answered


def test_a_report_after_the_stop_moves_the_end_of_its_usage(functions, zen, clock):
    """The VM heard after the stop (it has not read its STOP yet) and silent since: billed until that report +
    ``heartbeat_timeout_s``, the stop's own timeout unchanged."""
    functions.tick()
    running(functions, clock, "late", "vm-4")
    clock.advance(100)
    functions.tick()
    functions.stop({"job_id": "late", "reason": "looks hung"})
    stop_at = clock()
    clock.advance(50)
    functions.heartbeat(heartbeat("late", "RUNNING", 3, vm="vm-4"))
    heard = clock()
    ticks_until_over(functions, zen, clock, "late")
    ended = job(zen, "late")
    assert ended.status.value == "CANCELLED" and ended.finished_at is not None
    assert stop_at + timedelta(seconds=120) <= ended.finished_at <= stop_at + timedelta(seconds=120 + TICK_S)
    assert billed(zen, "late")[2] == min(heard + timedelta(seconds=120), ended.finished_at)


def test_a_new_attempt_starts_without_the_last_ones_vm_report():
    """``heard_at`` is the current attempt's: a job requeued (its queue took it back and its VM went silent; lost; a
    retry) clears it, so no later attempt's unanswered stop is billed from an earlier attempt's VM's report."""
    from zen.core import lifecycle, silence
    from zen.core.lease import Deadlines
    from zen.core.models import Job, JobStatus
    from zen.core.retries import Retry

    at = datetime(2026, 12, 1, tzinfo=timezone.utc)
    job = Job(job_id="j", status=JobStatus.STOPPING, attempt=1, max_attempts=3, cluster="c", user_id="u", priority=0,
              regions=["r"], request={}, request_hash="h", max_runtime_s=60, vm="vm-a", region="r", zone="r-a",
              last_seq=2, last_heartbeat_at=at, submitted_at=at, queued_at=at, started_at=at, finished_at=None,
              exit_code=None, message=None, updated_at=at, preempted_by="job urgent", heard_at=at)
    deadlines = Deadlines()
    preempted = silence.decide_silence(job, at + timedelta(seconds=deadlines.preempted_stop_s + 1), deadlines)
    assert preempted is not None and preempted.changes[-1].to is JobStatus.PENDING and preempted.fields["heard_at"] is None
    lost = lifecycle.lose_attempt(job.model_copy(update={"status": JobStatus.RUNNING}), "silent")
    assert lost.changes[-1].to is JobStatus.QUEUED and lost.fields["heard_at"] is None
    assert Retry("failed", "retry", at, 1).fields(1, 3)["heard_at"] is None
