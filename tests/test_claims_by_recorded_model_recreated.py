"""The claim check reads mig_instances.model, recorded at an instance's first sight and again when its VM starts a
billed segment (see_mig_instances). After the models were reordered ([standard, spot] -> [spot, standard]) the
primary MIG's template is spot; a VM the MIG recreates under the same name (a repair: the update policy is
OPPORTUNISTIC, terraform/compute.tf) boots from it, spot. Recorded once, it was still read 'standard', and a job that
accepts standard VMs only was confirmed to a spot VM."""

from __future__ import annotations

from datetime import timedelta

from tests.messages import heartbeat, job_request
from tests.test_claims_by_recorded_model import CLUSTER, _zen
from zen.store import fleet, repository

VM = "zen-4xa100-40gb-us-central1-ab12"  # the primary MIG's


def test_a_vm_recreated_from_the_reordered_template_is_checked_as_what_it_now_is(
        config, db, publisher, clock, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    before, _ = _zen(config, db, publisher, clock, ["standard", "spot"])
    with before.db.transaction() as session:  # first seen while the primary MIG made standard VMs
        fleet.see_instances(session, CLUSTER, "us-central1", [VM], clock(), model="standard")
    zen, functions = _zen(config, db, publisher, clock, ["spot", "standard"])  # reordered: the primary is spot now
    with zen.db.transaction() as session:  # the MIG recreates the instance (same name) from its spot template:
        clock.advance(60)                     # listed not billed while it is recreated, then billed again
        fleet.see_instances(session, CLUSTER, "us-central1", [VM], clock(), billed=[], model="spot")
        clock.advance(60)
        fleet.see_instances(session, CLUSTER, "us-central1", [VM], clock(), model="spot")
        [model] = [r["model"] for r in session.sql("SELECT model FROM mig_instances WHERE name = :n", n=VM)]
    functions.submit(job_request("never-preempt", cluster=CLUSTER, provisioning="standard"))
    functions.heartbeat(heartbeat("never-preempt", "CLAIMED", 1, vm=VM))
    with zen.db.transaction() as session:
        job = repository.get_job(session, "never-preempt")
    assert (job.status.value, job.vm) == ("QUEUED", None), (
        f"a standard-only job was {job.status.value} on {job.vm}, recreated from the spot template "
        f"(recorded model still {model!r})")


def test_each_billed_segment_is_priced_at_the_model_it_ran_as(db, clock):
    """The VM recreated from another model's template: its earlier segment stays the model it ran as (the row's model
    changes for the segment that starts then), so neither is repriced as the other."""
    from zen.store import usage

    start = clock()
    with db.transaction() as session:
        fleet.see_instances(session, "c", "us-central1", ["vm-r"], clock(), model="standard")  # billed from here
        clock.advance(600)
        fleet.see_instances(session, "c", "us-central1", ["vm-r"], clock(), model="standard")
        clock.advance(60)
        fleet.see_instances(session, "c", "us-central1", ["vm-r"], clock(), billed=[], model="standard")  # recreated
        clock.advance(60)
        fleet.see_instances(session, "c", "us-central1", ["vm-r"], clock(), model="spot")  # billed again, as spot
        clock.advance(300)
        fleet.see_instances(session, "c", "us-central1", ["vm-r"], clock(), model="spot")
        rows = usage.run(session, "fleet_by_region", since=start - timedelta(hours=1), now=clock())
    segments = sorted((r["model"], round(float(r["vm_seconds"]))) for r in rows if r["name"] == "vm-r")
    assert segments == [("spot", 300), ("standard", 600)], segments


def test_an_attempt_is_priced_at_the_model_of_the_segment_it_ran_in(config, db, publisher, clock, db_url, monkeypatch):
    """Its attempt ended (by the lost-job sweep, say) after its VM was recreated from the other model's template: it
    ran on the VM before, and is priced as that VM's model, not the recreated one's."""
    from zen.store import usage

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = _zen(config, db, publisher, clock, ["standard", "spot"])
    with zen.db.transaction() as session:
        fleet.see_instances(session, CLUSTER, "us-central1", [VM], clock(), model="standard")
    functions.submit(job_request("ran", cluster=CLUSTER))
    functions.heartbeat(heartbeat("ran", "CLAIMED", 1, vm=VM))
    functions.heartbeat(heartbeat("ran", "RUNNING", 2, vm=VM))
    with zen.db.transaction() as session:  # recreated under the same name, as spot (the models reordered since)
        clock.advance(60)
        fleet.see_instances(session, CLUSTER, "us-central1", [VM], clock(), model="standard")
        clock.advance(60)
        fleet.see_instances(session, CLUSTER, "us-central1", [VM], clock(), billed=[], model="spot")
        clock.advance(60)
        fleet.see_instances(session, CLUSTER, "us-central1", [VM], clock(), model="spot")
    functions.heartbeat(heartbeat("ran", "FAILED", 3, vm=VM, exit_code=1))  # its end, read after the recreation
    with zen.db.transaction() as session:
        [row] = usage.attempts_of_job(session, "ran")
    assert row["model"] == "standard", row
