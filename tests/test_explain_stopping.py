"""`zen explain` (and the console's job line) of a STOPPING job said only "on VM vm-a in us-central1": not that
it was stopping, why (the user's reason, a preemption by its queue), nor until when its VM may answer before
the sweep ends the job without its word."""

from __future__ import annotations

from datetime import timedelta

from tests.messages import heartbeat, job_request
from zen.store import repository


def why(zen, job_id: str) -> str:
    from zen.cli.queues import explain_line, utc_time

    with zen.db.transaction() as session:
        job = repository.get_job(session, job_id)
        return explain_line(session, zen.config, job, at=lambda moment: utc_time(moment, job.updated_at))


def test_a_stopping_job_says_why_and_until_when(functions, zen, clock):
    functions.submit(job_request("j"))
    functions.heartbeat(heartbeat("j", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("j", "RUNNING", 2, vm="vm-a"))
    clock.advance(30)
    functions.stop({"job_id": "j", "reason": "wrong learning rate"})
    due = clock() + timedelta(seconds=zen.config.deadlines.stop_timeout_s)
    line = why(zen, "j")
    assert "on VM vm-a in us-central1; stopping: wrong learning rate" in line, line
    assert f"unanswered by {due:%H:%M:%S} UTC, it is ended without its VM's word" in line, line


def test_zen_jobs_get_shows_the_stop_reason(functions, zen, db_url, monkeypatch, capsys):
    from zen.cli.main import main

    functions.submit(job_request("k"))
    functions.heartbeat(heartbeat("k", "CLAIMED", 1, vm="vm-a"))
    functions.stop({"job_id": "k", "reason": "wrong data"})
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert main(["jobs", "get", "k"]) == 0
    assert "stop_reason: wrong data" in capsys.readouterr().out
