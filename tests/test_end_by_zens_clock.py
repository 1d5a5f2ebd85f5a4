"""A job's end is Zen's time (or Pub/Sub's publish time, for a final report read late), never its final report's
own: an agent whose clock is behind Zen's (accepted: tests/test_agent_clock_behind.py) would end its job before Zen
last heard it run (and before the stop's history row), its attempt billed for a fraction of the time it held the VM."""

from __future__ import annotations

from datetime import timedelta

from tests.messages import heartbeat, job_request
from zen.store import repository, usage

BEHIND = timedelta(minutes=30)


def _job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def _usage(zen, job_id):
    with zen.db.transaction() as session:
        return usage.attempts_of_job(session, job_id)


def _history(zen, job_id):
    with zen.db.transaction() as session:
        return repository.job_history(session, job_id)


def _beat(clock, job_id, status, seq, **extra):
    return heartbeat(job_id, status, seq, vm="vm-a", sent_at=(clock() - BEHIND).isoformat(), **extra)


def test_an_hour_run_by_an_agent_behind_is_billed_its_hour(functions, zen, clock):
    functions.submit(job_request("j"))
    claim = clock()
    functions.heartbeat(_beat(clock, "j", "CLAIMED", 1))
    clock.advance(10)
    functions.heartbeat(_beat(clock, "j", "RUNNING", 2))
    seq = 3
    for _ in range(12):  # an hour of reports, every 5 min
        clock.advance(300)
        functions.heartbeat(_beat(clock, "j", "RUNNING", seq))
        seq += 1
    last_heard = _job(zen, "j").last_heartbeat_at
    clock.advance(5)
    functions.heartbeat(_beat(clock, "j", "SUCCEEDED", seq, exit_code=0))
    job = _job(zen, "j")
    [row] = _usage(zen, "j")
    held_s = (clock() - claim).total_seconds()
    billed_s = (row["ended_at"] - row["started_at"]).total_seconds()
    assert billed_s >= held_s - 60, f"billed {billed_s:.0f} s for an attempt that held its VM {held_s:.0f} s"
    assert job.finished_at >= last_heard, (
        f"finished_at {job.finished_at} is {(last_heard - job.finished_at).total_seconds():.0f} s before Zen last "
        f"heard the job RUNNING ({last_heard})")


def test_a_stop_answered_by_an_agent_behind_ends_after_the_stop(functions, zen, clock):
    functions.submit(job_request("s"))
    functions.heartbeat(_beat(clock, "s", "CLAIMED", 1))
    clock.advance(10)
    functions.heartbeat(_beat(clock, "s", "RUNNING", 2))
    clock.advance(3600)
    functions.heartbeat(_beat(clock, "s", "RUNNING", 3))
    functions.stop({"job_id": "s", "reason": "not needed"})
    stopped_at = clock()
    clock.advance(20)
    functions.heartbeat(_beat(clock, "s", "STOPPED", 4, exit_code=143))
    job = _job(zen, "s")
    assert job.status.value == "CANCELLED"
    history = _history(zen, "s")
    assert job.finished_at >= stopped_at, (
        f"CANCELLED at {job.finished_at}, {(stopped_at - job.finished_at).total_seconds():.0f} s before the stop "
        f"was asked ({stopped_at}); history: {[(h.get('to_status'), h.get('at')) for h in history][-3:]}")
