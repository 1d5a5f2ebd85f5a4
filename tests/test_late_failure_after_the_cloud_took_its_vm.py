"""A late FAILED that the job's retries retry, of an attempt the sweep took for the cloud's doing: the retry given once.

A standard VM's host event stopped it just as its job failed (exit code 3, its report journaled); the sweep saw the VM
stopped and requeued the job unspent (``zen.jobs.cloud_silence``: max_attempts raised by one, a preemption counted).
GCE restarted the VM and its agent sent the FAILED: its retry (``zen.jobs.late_final``) raised max_attempts once more,
so the job of max_attempts 1 had two attempts left to lose, ran a third one after its next attempt was lost, and its
budget's reason counted one loss where there were two. Through the functions, against a real Postgres."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_silent_vm_taken_by_cloud import _pass, _silent_after, _zen
from tests.test_standard_vm_host_event import STANDARD_VM
from zen.store import repository


def test_a_late_failure_retried_after_the_cloud_took_its_vm_spends_no_second_attempt(config, db, publisher, clock,
                                                                                    db_url, monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    pool = "us-central1/standard"
    _pass(zen, pool, [STANDARD_VM], [STANDARD_VM], "standard")
    functions.submit(job_request("j", max_attempts=1, max_retries=1, retry_backoff_s=0))
    functions.heartbeat(heartbeat("j", "CLAIMED", 1, vm=STANDARD_VM))
    status, attempt, max_attempts, _ = _silent_after(  # a host error: TERMINATED, GCE restarting it
        zen, functions, STANDARD_VM, lambda: _pass(zen, pool, [STANDARD_VM], [], "standard"), claimed=True)
    assert (status, attempt, max_attempts) == ("QUEUED", 2, 2)
    functions.heartbeat(heartbeat("j", "FAILED", 9, vm=STANDARD_VM, exit_code=3))  # its restarted agent's journal
    with zen.db.transaction() as tx:
        record = repository.get_job(tx, "j")
    assert (record.status.value, record.attempt, record.max_attempts, record.retries, record.preemptions) == (
        "QUEUED", 2, 2, 1, 0)
    for seq, status in enumerate(("CLAIMED", "RUNNING"), start=1):  # the retry, then its VM goes silent
        functions.heartbeat(heartbeat("j", status, seq, attempt=2, vm="vm-b"))
    for _ in range(4):
        clock.advance(50)
        functions.tick()
    with zen.db.transaction() as tx:
        record = repository.get_job(tx, "j")
        last = repository.job_history(tx, "j")[-1]["reason"]
    assert (record.status.value, record.attempt) == ("FAILED", 2), (record.status, record.attempt, last)
    assert last == ("attempt budget spent (1 of 1 attempts lost, besides 1 retried); the last: no heartbeat from vm-b "
                    "for 120s")
