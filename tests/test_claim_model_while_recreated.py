"""A claim from a VM its MIG recreated under the same name, read after a scaling pass saw the VM before it stop and
before one saw the new VM billed: the new VM boots from the MIG's template now, not as the row recorded the VM
before it (mig_instances.model changes only when a billed segment begins: see_mig_instances). After the cluster's
models were reordered the two differ: a job that accepts standard VMs only (never preempted) was confirmed on the
recreated spot VM, and one that accepts spot only was refused by a recreated spot VM taken for the standard one
before it (zen.jobs.claims._unaccepted_model)."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_claims_by_recorded_model import CLUSTER, _zen
from zen.store import fleet, repository

VM = f"zen-{CLUSTER}-us-central1-ab12"  # the primary MIG's


def _recreated(config, db, publisher, clock, before: list[str], after: list[str]):
    """The VM seen billed as ``before``'s primary model; the models reordered to ``after``; a pass sees the VM
    stopped (its MIG recreating it from the reordered template) and none has seen the new VM billed yet."""
    first, _ = _zen(config, db, publisher, clock, before)
    with first.db.transaction() as session:
        fleet.see_instances(session, CLUSTER, "us-central1", [VM], clock(), model=before[0])
        clock.advance(600)
        fleet.see_instances(session, CLUSTER, "us-central1", [VM], clock(), model=before[0])
    zen, functions = _zen(config, db, publisher, clock, after)
    with zen.db.transaction() as session:
        clock.advance(60)
        fleet.see_instances(session, CLUSTER, "us-central1", [VM], clock(), billed=[], model=after[0])
    clock.advance(30)
    return zen, functions


def _claimed(zen, functions, job_id: str, provisioning: str):
    functions.submit(job_request(job_id, cluster=CLUSTER, provisioning=provisioning))
    functions.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=VM))  # the recreated VM's agent
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def test_a_standard_only_job_is_refused_by_the_recreated_spot_vm(config, db, publisher, clock, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = _recreated(config, db, publisher, clock, ["standard", "spot"], ["spot", "standard"])
    job = _claimed(zen, functions, "never-preempt", "standard")
    assert (job.status.value, job.vm) == ("QUEUED", None), (
        f"a standard-only job was {job.status.value} on {job.vm}, recreated from the spot template")


def test_a_spot_only_job_is_confirmed_on_the_recreated_spot_vm(config, db, publisher, clock, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = _recreated(config, db, publisher, clock, ["standard", "spot"], ["spot", "standard"])
    job = _claimed(zen, functions, "cheap", "spot")
    assert (job.status.value, job.vm) == ("ASSIGNED", VM), (
        f"a spot-only job was {job.status.value} on {job.vm}: the recreated spot VM was taken for standard")


def test_the_vm_seen_billed_again_keeps_its_new_model(config, db, publisher, clock, db_url, monkeypatch):
    """Once a pass sees the recreated VM billed, its row records it (and its name no longer decides)."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = _recreated(config, db, publisher, clock, ["standard", "spot"], ["spot", "standard"])
    with zen.db.transaction() as session:
        fleet.see_instances(session, CLUSTER, "us-central1", [VM], clock(), model="spot")
    job = _claimed(zen, functions, "never-preempt", "standard")
    assert (job.status.value, job.vm) == ("QUEUED", None), (job.status.value, job.vm)
