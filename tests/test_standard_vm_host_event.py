"""A silent attempt whose standard VM a scaling pass saw stop is the cloud's doing, not the job's.

A GPU VM cannot live-migrate: on a host event (maintenance, a host error) GCE terminates it (terraform's
``on_host_maintenance = "TERMINATE"``) and restarts a standard one under its name with its disks
(``automatic_restart``). A host error gives its agent no shutdown to report from, and a restart on another host may
take minutes: the lost-job sweep judged the attempt first and spent one of the job's attempts, so a job of
max_attempts 1 FAILED with "attempt budget spent" for the cloud's event, while the same event with a quicker restart
(the restarted agent's PREEMPTED, ``zen.agent.restart``) reran it unspent. A pass had listed the VM stopped (no longer
billed), Zen deleting none of it, as for a spot VM taken (``zen.jobs.cloud_silence``). A standard VM still running,
silent, spends one as before. Through the functions, the passes' rows written as a pass writes them, against a real
Postgres."""

from __future__ import annotations

from tests.test_silent_vm_taken_by_cloud import _pass, _silent_after, _zen
from zen.core.notify import verb
from zen.store import repository

STANDARD_VM = "zen-4xa100-40gb-us-central1-std-ef56"  # the standard MIG's


def test_a_job_whose_standard_vm_a_host_event_stopped_is_requeued_unspent(config, db, publisher, clock, db_url,
                                                                          monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    pool = "us-central1/standard"
    _pass(zen, pool, [STANDARD_VM], [STANDARD_VM], "standard")
    status, attempt, max_attempts, last = _silent_after(  # a host error: TERMINATED, GCE restarting it
        zen, functions, STANDARD_VM, lambda: _pass(zen, pool, [STANDARD_VM], [], "standard"))
    assert (status, attempt, max_attempts) == ("QUEUED", 2, 2), (status, attempt, max_attempts, last)
    with zen.db.transaction() as tx:
        [lost] = [r for r in repository.all_job_events(tx) if r["to_status"] == "LOST"]
    assert lost["reason"].startswith(f"no heartbeat from {STANDARD_VM} for 120s, and a scaling pass saw its standard "
                                     "VM stopped since, not by Zen"), lost["reason"]
    assert lost["reason"].endswith("(no attempt spent)") and "preempted" not in lost["reason"], lost["reason"]
    assert verb("PREEMPTED", {"reason": lost["reason"]}) == "was requeued"  # its notice: no preemption of a standard VM


def test_a_job_whose_standard_vm_runs_on_silent_spends_its_attempt(config, db, publisher, clock, db_url, monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    pool = "us-central1/standard"
    _pass(zen, pool, [STANDARD_VM], [STANDARD_VM], "standard")
    status, _, _, last = _silent_after(  # listed RUNNING still: its agent or its network went silent, not the VM
        zen, functions, STANDARD_VM, lambda: _pass(zen, pool, [STANDARD_VM], [STANDARD_VM], "standard"))
    assert status == "FAILED" and last.endswith(f"the last: no heartbeat from {STANDARD_VM} for 120s"), (status, last)
