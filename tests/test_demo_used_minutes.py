"""`make demo`'s "used by jobs" VM-minutes count every attempt that ran: a failed attempt retried (its job's
history goes RUNNING -> PENDING) was left out, which the demo's own pipeline plays (its train step succeeds at
attempt 2), so the demo showed more waste than there was."""

from __future__ import annotations

from tests.messages import heartbeat, job_request


def test_a_retried_attempts_minutes_count_as_used(zen_and_fn, clock):
    from zen_dev.demo import _summarise

    zen, fn = zen_and_fn
    fn.submit(job_request("train", max_retries=1, retry_exit_codes=[1], retry_backoff_s=0))
    for attempt, vm, final, code in ((1, "vm-a", "FAILED", 1), (2, "vm-b", "SUCCEEDED", 0)):
        fn.tick()  # the retry's backoff over: queued again
        fn.heartbeat(heartbeat("train", "CLAIMED", 1, attempt=attempt, vm=vm))
        fn.heartbeat(heartbeat("train", "RUNNING", 2, attempt=attempt, vm=vm))
        clock.advance(60)
        fn.heartbeat(heartbeat("train", final, 3, attempt=attempt, vm=vm, exit_code=code, message="done"))
    with zen.db.transaction() as session:
        assert session.sql("SELECT status, attempt FROM jobs WHERE job_id = 'train'") == [
            {"status": "SUCCEEDED", "attempt": 2}]
    assert _summarise(zen.db, []).vm_minutes_used == 2.0  # each attempt's minute, not the last alone
