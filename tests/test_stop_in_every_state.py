"""A user's stop in each state a job can be in: the end, its history, what is still told or
deliverable, and whether a late report revives it."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.test_given_back_claims import history, job
from tests.test_tags import with_region_tags


def controls(publisher, vm=None):
    out = [json.loads(m.data) for m in publisher.on("zen-vm-control")]
    return [c for c in out if vm is None or c["vm"] == vm]


def starts(publisher, job_id):
    return [json.loads(m.data) for m in publisher.on("zen-job-start") if json.loads(m.data)["job_id"] == job_id]


def usage(zen, job_id):
    from zen.store import usage as usage_rows
    with zen.db.transaction() as session:
        return usage_rows.attempts_of_job(session, job_id)


def test_retry_backoff_stop_then_due_tick_and_late_report(functions, zen, publisher, clock):
    functions.submit(job_request("r1", max_retries=2, retry_backoff_s=30))
    functions.heartbeat(heartbeat("r1", "CLAIMED", 1))
    functions.heartbeat(heartbeat("r1", "RUNNING", 2))
    functions.heartbeat(heartbeat("r1", "FAILED", 3, exit_code=1))
    assert job(zen, "r1").status.value == "PENDING"
    functions.stop({"job_id": "r1", "reason": "enough"})
    j = job(zen, "r1")
    assert j.status.value == "CANCELLED" and j.hold is None and j.hold_until is None
    clock.advance(120)
    functions.tick()
    functions.heartbeat(heartbeat("r1", "FAILED", 3, exit_code=1))  # redelivered
    functions.heartbeat(heartbeat("r1", "CLAIMED", 5, attempt=2, vm="vm-b"))
    assert job(zen, "r1").status.value == "CANCELLED"
    assert len(starts(publisher, "r1")) == 1
    assert controls(publisher, "vm-b")[-1]["action"] == "RELEASE"


def test_pipeline_parent_stopped_while_running(functions, zen, publisher, clock):
    functions.submit(job_request("p"))
    functions.submit(job_request("c-ok", after=["p"]))
    functions.submit(job_request("c-any", after=["p"], after_condition="any"))
    functions.submit(job_request("g", after=["c-ok"]))
    functions.heartbeat(heartbeat("p", "CLAIMED", 1))
    functions.heartbeat(heartbeat("p", "RUNNING", 2))
    functions.stop({"job_id": "p"})
    assert [job(zen, x).status.value for x in ("p", "c-ok", "c-any", "g")] == ["STOPPING", "PENDING", "PENDING", "PENDING"]
    functions.heartbeat(heartbeat("p", "STOPPED", 3, exit_code=143))
    st = [job(zen, x).status.value for x in ("p", "c-ok", "c-any", "g")]
    assert st == ["CANCELLED", "CANCELLED", "QUEUED", "CANCELLED"], st


def test_pipeline_parent_stopping_times_out(functions, zen, publisher, clock):
    functions.submit(job_request("p"))
    functions.submit(job_request("c", after=["p"]))
    functions.heartbeat(heartbeat("p", "CLAIMED", 1))
    functions.heartbeat(heartbeat("p", "RUNNING", 2))
    functions.stop({"job_id": "p"})
    clock.advance(130)
    functions.tick()
    assert job(zen, "p").status.value == "CANCELLED"
    assert job(zen, "c").status.value == "CANCELLED"
    # the VM's late success does not revive the parent nor start the child
    functions.heartbeat(heartbeat("p", "SUCCEEDED", 3, exit_code=0))
    assert job(zen, "p").status.value == "CANCELLED"
    assert job(zen, "c").status.value == "CANCELLED"


def test_stop_while_vm_preempted_same_moment_preempted_first(functions, zen, publisher, clock):
    functions.submit(job_request("x"))
    functions.heartbeat(heartbeat("x", "CLAIMED", 1))
    functions.heartbeat(heartbeat("x", "RUNNING", 2))
    functions.heartbeat(heartbeat("x", "PREEMPTED", 3))
    assert job(zen, "x").status.value == "QUEUED"
    functions.stop({"job_id": "x"})
    assert job(zen, "x").status.value == "CANCELLED"
    functions.heartbeat(heartbeat("x", "CLAIMED", 1, attempt=2, vm="vm-b"))
    assert job(zen, "x").status.value == "CANCELLED"
    assert controls(publisher, "vm-b")[-1]["action"] == "RELEASE"
    clock.advance(4000)
    functions.tick()
    assert len(starts(publisher, "x")) == 2


def test_stop_while_vm_preempted_same_moment_stop_first(functions, zen, publisher, clock):
    functions.submit(job_request("x"))
    functions.heartbeat(heartbeat("x", "CLAIMED", 1))
    functions.heartbeat(heartbeat("x", "RUNNING", 2))
    functions.stop({"job_id": "x"})
    functions.heartbeat(heartbeat("x", "PREEMPTED", 3))
    j = job(zen, "x")
    assert j.status.value == "CANCELLED" and j.attempt == 1
    assert len(starts(publisher, "x")) == 1
    assert [u["outcome"] for u in usage(zen, "x")] == ["STOPPED"]


def test_stop_assigned_then_vm_succeeded(functions, zen, publisher, clock):
    functions.submit(job_request("a"))
    functions.heartbeat(heartbeat("a", "CLAIMED", 1))
    functions.stop({"job_id": "a", "reason": "oops"})
    assert job(zen, "a").status.value == "STOPPING"
    assert controls(publisher, "vm-a")[-1]["action"] == "STOP"
    functions.heartbeat(heartbeat("a", "STOPPED", 2, message="zen: stopped before it started (oops)"))
    j = job(zen, "a")
    assert j.status.value == "CANCELLED"


def test_stop_twice_and_after_end(functions, zen, publisher, clock):
    functions.submit(job_request("t"))
    functions.heartbeat(heartbeat("t", "CLAIMED", 1))
    functions.heartbeat(heartbeat("t", "RUNNING", 2))
    functions.stop({"job_id": "t", "reason": "first"})
    functions.stop({"job_id": "t", "reason": "second"})
    j = job(zen, "t")
    assert j.status.value == "STOPPING" and j.stop_reason == "first"
    functions.heartbeat(heartbeat("t", "STOPPED", 3, exit_code=143))
    functions.stop({"job_id": "t", "reason": "third"})
    j = job(zen, "t")
    assert j.status.value == "CANCELLED" and j.stop_reason == "first"
    h = history(zen, "t")
    assert sum(1 for r in h if r[1] == "CANCELLED") == 1
    assert len(usage(zen, "t")) == 1


def test_stop_of_a_job_no_region_may_run(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    tagged = with_region_tags(config, {"us-west1": ["hipaa"]})
    old = FunctionsInvoker(Zen(tagged, db, publisher, clock))
    old.submit(job_request("phi", requires_tags=["hipaa"]))
    zen = Zen(with_region_tags(config, {}), db, publisher, clock)
    fn = FunctionsInvoker(zen)
    claim = heartbeat("phi", "CLAIMED", 1, vm="w-1", region="us-west1", zone="us-west1-b", tags=["hipaa"])
    fn.heartbeat(claim)
    j = job(zen, "phi")
    assert j.status.value == "PENDING" and j.hold.startswith("no region"), j
    fn.stop({"job_id": "phi", "reason": "give up"})
    j = job(zen, "phi")
    assert j.status.value == "CANCELLED" and j.hold is None and j.hold_until is None
    clock.advance(400)
    FunctionsInvoker(Zen(tagged, db, publisher, clock)).tick()
    fn.heartbeat(dict(claim, seq=7))
    assert job(zen, "phi").status.value == "CANCELLED"
    assert controls(publisher, "w-1")[-1]["action"] == "RELEASE"


def test_array_task_stop_vs_array_stop(functions, zen, publisher, clock):
    functions.submit(job_request("sw", array={"count": 4, "max_parallel": 2}))
    functions.heartbeat(heartbeat("sw-0", "CLAIMED", 1, vm="vm-0"))
    functions.heartbeat(heartbeat("sw-0", "RUNNING", 2, vm="vm-0"))
    functions.stop({"job_id": "sw-3"})  # a held task
    assert [job(zen, f"sw-{i}").status.value for i in range(4)] == ["RUNNING", "QUEUED", "PENDING", "CANCELLED"]
    functions.stop({"job_id": "sw-0"})
    assert job(zen, "sw-0").status.value == "STOPPING"
    assert job(zen, "sw-2").status.value == "PENDING"  # not let go while sw-0 stops
    functions.heartbeat(heartbeat("sw-0", "STOPPED", 3, vm="vm-0"))
    assert [job(zen, f"sw-{i}").status.value for i in range(4)] == ["CANCELLED", "QUEUED", "QUEUED", "CANCELLED"]
    functions.stop({"job_id": "sw"})
    assert [job(zen, f"sw-{i}").status.value for i in range(4)] == ["CANCELLED"] * 4
    n_starts = len(publisher.on("zen-job-start"))
    clock.advance(4000)
    functions.tick()
    assert len(publisher.on("zen-job-start")) == n_starts

