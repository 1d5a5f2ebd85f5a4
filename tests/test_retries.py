"""Retries after failed exits (zen.core.retries) through the functions against a real Postgres: a failure
with a listed exit code goes back to PENDING as the next attempt, held for a doubling backoff that the
tick lifts; other codes, and a spent budget, end FAILED; each failed attempt's usage says FAILED."""

from __future__ import annotations

import json

import pytest

from tests.messages import agent_run, heartbeat, job_request
from tests.test_functions_lifecycle import job


def fail(fn, job_id, attempt, exit_code, vm="vm-a"):
    for beat in agent_run(job_id, attempt=attempt, vm=vm, final="FAILED", exit_code=exit_code):
        fn.heartbeat(beat)


def starts(publisher, job_id):
    return [json.loads(m.data)["attempt"] for m in publisher.on("zen-job-start") if json.loads(m.data)["job_id"] == job_id]


def test_a_listed_exit_code_is_retried_after_a_doubling_backoff_until_the_budget_is_spent(zen_and_fn, clock, publisher):
    zen, fn = zen_and_fn
    fn.submit(job_request("flaky", max_retries=2, retry_exit_codes=[3], retry_backoff_s=10))
    fail(fn, "flaky", 1, 3)
    held = job(zen, "flaky")
    assert (held.status.value, held.attempt, held.retries) == ("PENDING", 2, 1)
    assert held.hold.startswith("retry 1 of 2 after exit code 3, due ")
    fn.tick()  # not due yet
    assert job(zen, "flaky").status.value == "PENDING"
    clock.advance(10)
    fn.tick()
    assert job(zen, "flaky").status.value == "QUEUED" and starts(publisher, "flaky") == [1, 2]
    fail(fn, "flaky", 2, 3, vm="vm-b")
    clock.advance(19)
    fn.tick()
    assert job(zen, "flaky").status.value == "PENDING"  # the second backoff is 20 s
    clock.advance(1)
    fn.tick()
    assert job(zen, "flaky").status.value == "QUEUED"
    fail(fn, "flaky", 3, 3)
    ended = job(zen, "flaky")
    assert (ended.status.value, ended.exit_code, ended.attempt) == ("FAILED", 3, 3)
    with zen.db.transaction() as session:
        reasons = [r["reason"] for r in session.run("job_history", job_id="flaky")]
        outcomes = [r["outcome"] for r in session.sql(
            "SELECT outcome FROM attempt_usage WHERE job_id = 'flaky' ORDER BY attempt")]
    assert "attempt 1 failed with exit code 3: retry 1 of 2 after 10 s" in reasons
    assert "attempt 2 failed with exit code 3: retry 2 of 2 after 20 s" in reasons
    assert reasons[-1] == "exit code 3; its 2 retries (max_retries) made"  # not "exit code 3" alone, as with none
    assert outcomes == ["FAILED", "FAILED", "FAILED"]


@pytest.mark.parametrize("exit_code", [1, 0])
def test_an_unlisted_code_fails_and_success_succeeds(zen_and_fn, exit_code):
    zen, fn = zen_and_fn
    fn.submit(job_request("once", max_retries=3, retry_exit_codes=[3]))
    for beat in agent_run("once", final="FAILED" if exit_code else "SUCCEEDED", exit_code=exit_code):
        fn.heartbeat(beat)
    assert job(zen, "once").status.value == ("FAILED" if exit_code else "SUCCEEDED")
    with zen.db.transaction() as session:  # an unlisted code: no retry was due, none is said spent
        assert "max_retries" not in session.run("job_history", job_id="once")[-1]["reason"]


def test_any_non_zero_code_is_retried_when_none_is_listed_and_a_stop_is_never_retried(zen_and_fn):
    zen, fn = zen_and_fn
    fn.submit(job_request("any", max_retries=1, retry_backoff_s=0))
    fail(fn, "any", 1, 137)
    assert job(zen, "any").status.value == "PENDING"
    fn.tick()
    assert job(zen, "any").status.value == "QUEUED"
    fn.submit(job_request("stopped", max_retries=1))
    beats = agent_run("stopped", final="FAILED", exit_code=143)
    for beat in beats[:2]:
        fn.heartbeat(beat)
    fn.stop({"job_id": "stopped"})
    fn.heartbeat(beats[-1])
    assert job(zen, "stopped").status.value == "FAILED"


@pytest.mark.parametrize("limit", ["max_runtime_s", "disk"])
def test_a_job_the_agent_stopped_at_one_of_its_limits_is_not_retried(zen_and_fn, limit):
    """Killed at max_runtime_s (or its disk share), the job's exit code is its SIGTERM's, 143, which any-code
    retries took for its own failure: it ran to the limit again, each retry a whole max_runtime_s paid."""
    zen, fn = zen_and_fn
    fn.submit(job_request("slow", max_retries=2, retry_backoff_s=0))
    *beats, last = agent_run("slow", final="FAILED", exit_code=143)
    for beat in [*beats, {**last, "over_limit": limit}]:
        fn.heartbeat(beat)
    record = job(zen, "slow")
    assert (record.status.value, record.attempt, record.retries, record.exit_code) == ("FAILED", 1, 0, 143)
    fn.submit(job_request("g", nodes=2, max_retries=2, retry_backoff_s=0))  # a gang's node alike
    for vm in ("vm-1", "vm-2"):
        fn.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=f"10.0.0.{vm[-1]}"))
        fn.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))
    fn.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-1", exit_code=143, over_limit=limit))
    fn.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-2", exit_code=143, over_limit=limit))
    record = job(zen, "g")
    assert (record.status.value, record.attempt, record.retries) == ("FAILED", 1, 0)


@pytest.mark.parametrize("retry, field", [({"max_retries": 101}, "max_retries"),
                                          ({"max_retries": 1, "retry_backoff_s": 7200}, "retry_backoff_s"),
                                          ({"retry_exit_codes": [1]}, "need max_retries"),
                                          ({"max_retries": 1, "retry_exit_codes": [3, 0]}, "retry_exit_codes: 0 is no"),
                                          ({"max_retries": 1, "retry_exit_codes": [999]}, "retry_exit_codes: 999")])
def test_a_bad_retry_is_refused_naming_the_field(zen_and_fn, retry, field):
    zen, fn = zen_and_fn
    fn.submit(job_request("bad-retry", **retry))
    assert job(zen, "bad-retry") is None
    with zen.db.transaction() as session:
        reason = session.sql("SELECT reason FROM rejected_messages ORDER BY id DESC LIMIT 1")[0]["reason"]
    assert field in reason, reason


def test_a_retry_ended_without_a_code_of_its_own_shows_none_and_a_spent_budget_counts_only_losses(
        zen_and_fn, clock, db_url, monkeypatch, capsys):
    """Attempt 1 failed with 3 and was retried; attempt 2 ran, then its VM went silent and the sweep spent the
    budget (max_attempts 1). The job showed exit code 3 while attempt 2 ran and ended "FAILED ... (exit code 3)",
    blaming the code for a loss; its reason said "2 of 2 attempts lost" for the one it lost."""
    from zen.cli.main import main
    from zen.store import repository

    zen, fn = zen_and_fn
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    fn.submit(job_request("flaky", max_attempts=1, max_retries=1, retry_backoff_s=0))
    fail(fn, "flaky", 1, 3)
    assert (job(zen, "flaky").exit_code, job(zen, "flaky").hold.startswith("retry 1 of 1 after exit code 3")) == (None, True)
    fn.tick()
    for beat in agent_run("flaky", attempt=2, vm="vm-b")[:2]:  # CLAIMED, RUNNING: then silence
        fn.heartbeat(beat)
    assert job(zen, "flaky").exit_code is None
    for _ in range(4):
        clock.advance(50)
        fn.tick()
    ended = job(zen, "flaky")
    assert (ended.status.value, ended.attempt, ended.exit_code) == ("FAILED", 2, None)
    with zen.db.transaction() as session:
        assert repository.job_history(session, "flaky")[-1]["reason"] == (
            "attempt budget spent (1 of 1 attempts lost, besides 1 retried); the last: no heartbeat from vm-b for 120s")
    capsys.readouterr()
    assert main(["explain", "flaky"]) == 0
    assert "exit code 3" not in capsys.readouterr().out


def test_a_job_stopped_while_it_waits_for_its_retry_keeps_no_hold(zen_and_fn, db_url, monkeypatch, capsys):
    """A cancelled job showed "hold: retry 1 of 1 after exit code 3, due ..." as if a retry were still to come."""
    from zen.cli.main import main

    zen, fn = zen_and_fn
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    fn.submit(job_request("flaky", max_retries=1, retry_backoff_s=600))
    fail(fn, "flaky", 1, 3)
    fn.stop({"job_id": "flaky", "reason": "enough"})
    ended = job(zen, "flaky")
    assert (ended.status.value, ended.hold, ended.hold_until) == ("CANCELLED", None, None)
    capsys.readouterr()
    assert main(["jobs", "get", "flaky"]) == 0
    assert "hold:" not in capsys.readouterr().out


def test_preemptions_past_the_free_ones_are_counted_as_attempts_lost():
    """max_attempts 3; ten free preemptions (max_attempts 13, attempt 11); then the cloud takes the VM three more
    times: each spends an attempt of the 3, and the third ends the job FAILED. The reason counted every preemption
    as free: "1 of 1 attempts lost, besides 12 preempted"."""
    from datetime import datetime, timezone

    from zen.core import lifecycle
    from zen.core.models import Job, JobStatus

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    job = Job.model_validate(dict(
        job_id="j", status=JobStatus.RUNNING, attempt=11, max_attempts=13, preemptions=10, cluster="4xa100-40gb",
        user_id="alice", priority=0, regions=["us-central1"], request={}, request_hash="h", max_runtime_s=None,
        region="us-central1", zone="us-central1-a", vm="vm-1", last_seq=0, last_heartbeat_at=t0, submitted_at=t0,
        queued_at=t0, started_at=t0, finished_at=None, exit_code=None, message=None, updated_at=t0))
    for _ in range(3):
        decision = lifecycle.preempted_by_cloud(job, "vm-1", t0)
        job = job.model_copy(update={**decision.fields, "status": JobStatus.RUNNING, "vm": "vm-1"})
    assert decision.changes[-1].reason.startswith("attempt budget spent (3 of 3 attempts lost, besides 10 preempted free); "
                                                  "the last: ")


def test_an_attempt_the_kernel_killed_for_memory_is_said_so_in_its_history():
    """The agent's final report begins with what the kernel did (zen.agent.container.exit_note); the history says it
    beside the exit code, and a job's own output saying the same words later is only its output."""
    from zen.core.retries import ended

    note = "zen: killed: out of memory (exit code 137): the job's container reached its memory limit, 84.0 GiB"
    assert ended(137, None, 3600, "failed", note + "\nTraceback ...") == "killed: out of memory (exit code 137)"
    worker = "zen: exit code 1, after one of its processes was killed: out of memory: the job's container ..."
    assert ended(1, None, 3600, "failed", worker) == "exit code 1, after one of its processes was killed: out of memory"
    assert ended(137, None, 3600, "failed", "epoch 3\nzen: killed: out of memory") == "exit code 137"
    assert ended(137, None, 3600, "failed", None) == "exit code 137"


def test_a_retry_after_the_kernel_killed_the_attempt_for_memory_says_so():
    from datetime import datetime, timezone

    from tests.messages import heartbeat
    from zen.core.models import Heartbeat
    from zen.core.retries import next_retry

    note = "zen: killed: out of memory (exit code 137): the job's container reached its memory limit, 84.0 GiB"
    hb = Heartbeat.model_validate(heartbeat("j", "FAILED", 3, exit_code=137, message=note))
    retry = next_retry({"max_retries": 2, "retry_backoff_s": 0}, 0, 1, hb, datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert retry is not None and retry.reason == "attempt 1 was killed: out of memory (exit code 137): retry 1 of 2"
    plain = Heartbeat.model_validate(heartbeat("j", "FAILED", 3, exit_code=3))
    again = next_retry({"max_retries": 2, "retry_backoff_s": 0}, 0, 1, plain, datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert again is not None and again.reason == "attempt 1 failed with exit code 3: retry 1 of 2"
