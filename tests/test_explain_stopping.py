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


def test_a_gang_stopping_for_a_node_lost_says_when_the_sweep_reruns_it_by_its_nodes_fence(zen_and_fn, clock):
    """Its nodes' agents fence from a longer ``heartbeat_timeout_s`` than Zen's (lowered since their VMs booted): the
    sweep waits the rerun that much longer (``zen.core.lease.attempt_deadlines``), and so does the time Zen tells,
    as the STOPs' ``answer_within_s`` do (``silence.stop_left_s``); it said the configuration's, 180 s too soon."""
    from zen.core.lease import attempt_deadlines

    zen, fn = zen_and_fn
    fn.submit(job_request("g", nodes=2))
    for n, vm in enumerate(("vm-0", "vm-1")):
        fn.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=f"10.0.0.{n + 1}", heartbeat_timeout_s=300.0))
    for vm in ("vm-0", "vm-1"):
        fn.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm, heartbeat_timeout_s=300.0))
    clock.advance(30)
    fn.heartbeat(heartbeat("g", "PREEMPTED", 3, vm="vm-1", heartbeat_timeout_s=300.0))
    with zen.db.transaction() as session:
        job = repository.get_job(session, "g")
    assert job.status.value == "STOPPING"
    wait_s = attempt_deadlines(zen.config.deadlines, 300.0).preempted_stop_s
    assert wait_s > zen.config.deadlines.preempted_stop_s
    due = job.last_heartbeat_at + timedelta(seconds=wait_s)
    line = why(zen, "g")
    assert f"unanswered by {due:%H:%M:%S} UTC" in line, line
    clock.advance(zen.config.deadlines.preempted_stop_s + 5)  # past the configuration's: the sweep still waits
    zen.jobs.sweeps.sweep_lost()
    with zen.db.transaction() as session:
        assert repository.get_job(session, "g").status.value == "STOPPING"
