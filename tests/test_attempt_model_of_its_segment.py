"""An attempt is priced as the model of the first billed segment of its VM that lasted until its start or later
(insert_attempt_usage): claimed before a pass saw its VM billed, ended after the recreated VM was taken again, or
after its VM left its MIG, it was priced as the recreated VM's model (spot) though it ran on it as standard."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_claims_by_recorded_model import CLUSTER, _zen
from zen.store import fleet, usage

VM = "zen-4xa100-40gb-us-central1-ab12"  # the primary MIG's


def _see(zen, clock, advance, **kw):
    clock.advance(advance)
    with zen.db.transaction() as session:
        fleet.see_instances(session, CLUSTER, "us-central1", kw.pop("names", [VM]), clock(), **kw)


def _model(zen, job_id):
    with zen.db.transaction() as session:
        [row] = usage.attempts_of_job(session, job_id)
    return row["model"]


def _claim_run(functions, job_id):
    functions.submit(job_request(job_id, cluster=CLUSTER))
    functions.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=VM))
    functions.heartbeat(heartbeat(job_id, "RUNNING", 2, vm=VM))


def test_claimed_before_the_pass_saw_its_vm_billed(config, db, publisher, clock, db_url, monkeypatch):
    """The agent claims as soon as it boots; the pass that first sees the VM RUNNING (running_at) comes up to a
    tick later. started_at < the first segment's start: no element of billed_before matches, i.model (spot)."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = _zen(config, db, publisher, clock, ["standard", "spot"])
    _see(zen, clock, 0, billed=[], model="standard")  # listed while it is created
    clock.advance(10)
    _claim_run(functions, "early")                     # its agent claims
    _see(zen, clock, 30, model="standard")            # the next pass sees it billed: running_at
    _see(zen, clock, 60, model="standard")
    _see(zen, clock, 60, billed=[], model="spot")     # recreated (the models reordered since)
    _see(zen, clock, 60, model="spot")                # billed again, as spot
    functions.heartbeat(heartbeat("early", "FAILED", 3, vm=VM, exit_code=1))
    assert _model(zen, "early") == "standard"


def _recreated_as_spot(config, db, publisher, clock, job_id: str):
    """``job_id`` claimed and run on a standard VM, billed, then recreated by its MIG as spot and billed again."""
    zen, functions = _zen(config, db, publisher, clock, ["standard", "spot"])
    _see(zen, clock, 0, model="standard")
    _claim_run(functions, job_id)
    _see(zen, clock, 60, model="standard")
    _see(zen, clock, 60, billed=[], model="spot")
    _see(zen, clock, 60, model="spot")
    return zen, functions


def test_recreated_then_not_billed_again(config, db, publisher, clock, db_url, monkeypatch):
    """The recreated VM is itself preempted before the attempt's end is read: running_at is NULL, so
    `i.running_at > s.started_at` is NULL and the row's model (spot, the last segment's) is taken."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = _recreated_as_spot(config, db, publisher, clock, "twice")
    _see(zen, clock, 60, billed=[], model="spot")     # preempted again: no billed segment open
    functions.heartbeat(heartbeat("twice", "FAILED", 3, vm=VM, exit_code=1))
    assert _model(zen, "twice") == "standard"


def test_recreated_then_left_its_mig(config, db, publisher, clock, db_url, monkeypatch):
    """The recreated VM then left its MIG (vm_lifetimes): that path reads the last segment's model alone, never
    its billed_before."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = _recreated_as_spot(config, db, publisher, clock, "left")
    _see(zen, clock, 60, names=[], model="spot")      # gone from its MIG: kept in vm_lifetimes
    with zen.db.transaction() as session:
        rows = session.sql("SELECT model, billed_before FROM vm_lifetimes WHERE name = :n", n=VM)
    assert rows and rows[0]["billed_before"][0][2] == "standard", rows
    functions.heartbeat(heartbeat("left", "FAILED", 3, vm=VM, exit_code=1))
    assert _model(zen, "left") == "standard"


def test_claimed_between_the_last_billed_sight_and_the_vms_end(config, db, publisher, clock, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = _zen(config, db, publisher, clock, ["standard", "spot"])
    _see(zen, clock, 0, model="standard")              # billed as standard
    _see(zen, clock, 60, model="standard")             # its last billed sight (t+60)
    clock.advance(10)
    _claim_run(functions, "late-claim")                # t+70: VM1 (standard) still runs; no VM2 can exist yet
    _see(zen, clock, 60, billed=[], model="spot")      # t+130: VM1 ended (segment 1 closed at t+60)
    _see(zen, clock, 240, model="spot")                # t+370: the recreated VM billed, as spot
    functions.heartbeat(heartbeat("late-claim", "FAILED", 3, vm="zen-4xa100-40gb-us-central1-ab12", exit_code=1))
    assert _model(zen, "late-claim") == "standard"     # it ran on VM1, a standard VM
