"""A job's ``message`` is its current attempt's, as its ``exit_code`` is (tests/test_retries.py): an earlier
attempt's (its last lines, a retry's failure) is shown while the job waits to run again, and gone once another
attempt is claimed. Kept, a retry that went silent and spent the budget showed FAILED with attempt 1's traceback,
as if attempt 2 had failed with it; cleared with the retry itself, the failed attempt's last lines were stored
nowhere while the retry waited."""

from __future__ import annotations

from tests.messages import agent_run, heartbeat, job_request
from tests.test_functions_lifecycle import job


def test_a_lost_retry_does_not_show_the_failed_attempts_output_as_its_message(zen_and_fn, clock, db_url, monkeypatch,
                                                                             capsys):
    from zen.cli.main import main

    zen, fn = zen_and_fn
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    fn.submit(job_request("v", max_attempts=1, max_retries=1, retry_backoff_s=0))
    *beats, last = agent_run("v", attempt=1, vm="vm-1", final="FAILED", exit_code=3)
    for beat in [*beats, {**last, "message": "Traceback: ValueError: bad lr"}]:
        fn.heartbeat(beat)
    fn.tick()  # the retry is due: attempt 2
    fn.heartbeat(heartbeat("v", "CLAIMED", 1, attempt=2, vm="vm-2"))
    fn.heartbeat(heartbeat("v", "RUNNING", 2, attempt=2, vm="vm-2"))
    for _ in range(4):  # then silence: attempt 2 lost, the budget (1) spent
        clock.advance(50)
        fn.tick()
    ended = job(zen, "v")
    assert (ended.status.value, ended.attempt, ended.exit_code) == ("FAILED", 2, None)
    capsys.readouterr()
    assert main(["jobs", "get", "v"]) == 0
    assert "ValueError: bad lr" not in capsys.readouterr().out  # attempt 1's output, not why the job ended


def test_an_attempt_requeued_after_a_loss_shows_the_last_ones_message_until_claimed(zen_and_fn, clock):
    zen, fn = zen_and_fn
    fn.submit(job_request("w", max_attempts=2))
    fn.heartbeat(heartbeat("w", "CLAIMED", 1, vm="vm-1"))
    fn.heartbeat({**heartbeat("w", "RUNNING", 2, vm="vm-1"), "message": "epoch 3: loss 0.41"})
    assert job(zen, "w").message == "epoch 3: loss 0.41"
    for _ in range(4):  # silence: attempt 1 lost, attempt 2 queued
        clock.advance(50)
        fn.tick()
    requeued = job(zen, "w")
    assert (requeued.status.value, requeued.attempt, requeued.message) == ("QUEUED", 2, "epoch 3: loss 0.41")
    fn.heartbeat(heartbeat("w", "CLAIMED", 3, attempt=2, vm="vm-2"))
    assert (job(zen, "w").status.value, job(zen, "w").message) == ("ASSIGNED", None)


def test_a_retried_failures_last_lines_stay_while_the_retry_waits(zen_and_fn):
    zen, fn = zen_and_fn
    fn.submit(job_request("r", max_retries=1, retry_backoff_s=600))
    *beats, last = agent_run("r", attempt=1, vm="vm-1", final="FAILED", exit_code=3)
    for beat in [*beats, {**last, "message": "Traceback: ValueError: bad lr"}]:
        fn.heartbeat(beat)
    held = job(zen, "r")
    assert (held.status.value, held.attempt, held.message) == ("PENDING", 2, "Traceback: ValueError: bad lr")
