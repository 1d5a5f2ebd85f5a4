"""The lost-job sweep reads the held jobs silent past their deadline, the most silent first, at most 500 a tick
(``Sweeps.sweep_lost``). It read every held job silent past the shorter of ``heartbeat_timeout_s`` and
``stop_timeout_s``: with a ``stop_timeout_s`` raised for large checkpoints (600 s against the 120 s heartbeat
timeout), each STOPPING job, its deadline counted from its stop, was read from 120 s after it, and left alone until
600 s. A stop of an array of 500 running tasks filled the window with them for eight minutes: a job whose VM died
meanwhile, silent after the stop, was never reached and stayed RUNNING, its rerun waiting until those stops ended.
Each kind of held job is now read past its own deadline. (A window of 2 stands here for the tick's 500.)"""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request

STOP_TIMEOUT_S = 600


@pytest.fixture
def config(project):
    from zen.core.config import load_config

    config = load_config().model_copy(update={"project": project})
    deadlines = config.deadlines.model_copy(update={"stop_timeout_s": STOP_TIMEOUT_S})
    return config.model_copy(update={"deadlines": deadlines})


def status(zen, job_id: str) -> tuple[str, int]:
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT status, attempt FROM jobs WHERE job_id = :id", id=job_id)
    return row["status"], row["attempt"]


def test_stopping_jobs_waiting_for_their_answer_do_not_hide_a_silent_running_job(zen_and_fn, clock):
    zen, fn = zen_and_fn
    assert zen.config.deadlines.heartbeat_timeout_s == 120
    fn.submit(job_request("sweep", array={"count": 2}))
    fn.submit(job_request("dead"))
    for job_id, vm in (("sweep-0", "vm-0"), ("sweep-1", "vm-1"), ("dead", "vm-d")):
        fn.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=vm))
        fn.heartbeat(heartbeat(job_id, "RUNNING", 2, vm=vm))
    fn.stop({"job_id": "sweep", "reason": "enough trials"})  # their VMs upload checkpoints: up to 600 s
    assert [status(zen, f"sweep-{i}")[0] for i in range(2)] == ["STOPPING", "STOPPING"]
    clock.advance(10)
    fn.heartbeat(heartbeat("dead", "RUNNING", 3, vm="vm-d"))  # its last word: its VM dies after it
    clock.advance(130)  # "dead" silent 130 s, past heartbeat_timeout_s; the stops 140 s old, well within 600 s
    zen.jobs.sweeps.sweep_lost(limit=2)
    assert [status(zen, f"sweep-{i}")[0] for i in range(2)] == ["STOPPING", "STOPPING"]  # still waited for
    assert status(zen, "dead") == ("QUEUED", 2)  # requeued as its next attempt
