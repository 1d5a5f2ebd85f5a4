"""A flex-start VM's PREEMPTED at its run's end, read after a scaling pass saw that VM gone from its MIG (GCE deletes a
flex-start VM at its run's end; its report redelivered, or sent late): the pass forgot the VM's rows (its first word
and first RUNNING sight), and Zen's count of its run, read from them alone, found nothing to count from. The attempt's
end said "VM ... was preempted", untrue of a flex-start VM, which no one preempts; its run's start is read from the
lifetime the pass kept (``JobTx.vm_stop_seen``, as a silent attempt's is: ``zen.jobs.cloud_silence``)."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_flex_end_margin import BEAT, RUN_S
from tests.test_flex_run_end_after_stop_seen import MIXED, VM, _zen
from zen.store import fleet, repository


def _run_to_its_end(config, db, publisher, clock, db_url, monkeypatch, seen_before: float):
    """A job runs on flex-start ``VM`` to its run's end, its PREEMPTED read after a pass saw the VM gone."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = _zen(config, db, publisher, clock, ["flex-start", "spot"])
    with zen.db.transaction() as session:  # a pass sees the VM RUNNING, as flex-start
        fleet.see_instances(session, MIXED, "us-central1", [VM], clock(), model="flex-start")
    functions.heartbeat(BEAT | {"vm": VM, "seq": 1, "sent_at": clock().isoformat()})
    functions.submit(job_request("j"))
    functions.heartbeat(heartbeat("j", "CLAIMED", 2, vm=VM))
    functions.heartbeat(heartbeat("j", "RUNNING", 3, vm=VM))
    clock.advance(RUN_S - seen_before)
    with zen.db.transaction() as session:  # a pass sees the MIG without it: GCE deleted it
        fleet.see_instances(session, MIXED, "us-central1", [], clock(), model="flex-start")
    clock.advance(20)
    functions.heartbeat(heartbeat("j", "PREEMPTED", 4, vm=VM, message=f"zen: VM {VM} shut down (SIGTERM)"))
    with zen.db.transaction() as tx:
        [lost] = [r["reason"] for r in repository.all_job_events(tx) if r["to_status"] == "LOST"]
        job = repository.get_job(tx, "j")
    return job, lost


def test_a_flex_start_vms_run_end_read_after_a_pass_saw_it_gone_is_told_so(config, db, publisher, clock, db_url,
                                                                         monkeypatch):
    job, lost = _run_to_its_end(config, db, publisher, clock, db_url, monkeypatch, seen_before=10)
    assert (job.status.value, job.attempt) == ("QUEUED", 2), job.status  # requeued, no attempt spent
    assert lost.startswith(f"VM {VM} reached the end of its flex-start run"), lost


def test_one_gone_long_before_its_run_ends_still_reads_as_preempted(config, db, publisher, clock, db_url,
                                                                  monkeypatch):
    """Gone an hour before its run's end by Zen's count: not taken for its run's end."""
    job, lost = _run_to_its_end(config, db, publisher, clock, db_url, monkeypatch, seen_before=3600)
    assert job.attempt == 2, job.status
    assert lost == f"VM {VM} was preempted (no attempt spent)", lost
