"""An attempt claimed by the VM a MIG recreated under its name, before a scaling pass saw that VM billed, is priced as
the recreated VM's billed segment (its model, the price kept with it), not as the VM's before it (insert_attempt_usage).

A spot VM preempted, its MIG recreates it under the same name, and its agent claims a job within a pass interval of
booting: the pass that closed the first VM's segment saw it stopped before the claim, and the pass that opens the new
VM's segment comes after it. Taken as the last segment begun by the attempt's start, the attempt was priced at the
first VM's segment: the price kept when that VM began (before the catalog's refresh), or its model (before the
cluster's models were reordered), while the fleet's dollars bill the time it ran at the new VM's."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_claims_by_recorded_model import CLUSTER, _zen
from zen.core.prices import Price, PriceTable
from zen.store import fleet, prices, usage

VM = f"zen-{CLUSTER}-us-central1-ab12"  # the primary MIG's
THEN, LATER = 3600.0, 7200.0  # the catalog's standard price per VM-hour when the first VM began, and after the refresh
SPOT = 1200.0


def _catalog(db, usd: float, at) -> None:
    with db.transaction() as session:
        prices.store(session, PriceTable({("a2-highgpu-4g", "us-central1", "standard"): Price(usd, "catalog", at),
                                          ("a2-highgpu-4g", "us-central1", "spot"): Price(SPOT, "catalog", at)}), at)


def _see(zen, clock, advance: float, model: str, billed: bool = True) -> None:
    """A scaling pass ``advance`` s on lists the VM, billed or not, its pool priced from the catalog."""
    clock.advance(advance)
    with zen.db.transaction() as session:
        fleet.see_instances(session, CLUSTER, "us-central1", [VM], clock(), billed=[VM] if billed else [], model=model,
                            price=fleet.PoolPrice("a2-highgpu-4g", None, True, None))


def _claimed_by_the_recreated_vm(zen, functions, clock, db, second: str) -> dict:
    """The first VM (standard) billed, then seen stopped; the catalog refreshed; the recreated VM (``second``) claims
    job ``j`` 30 s later, and a pass sees it billed 30 s after that; the job runs 30 min. Its usage row."""
    _see(zen, clock, 0, "standard")
    _see(zen, clock, 600, "standard")
    _see(zen, clock, 60, "standard", billed=False)  # the first VM gone: its segment closed
    _catalog(db, LATER, clock())
    clock.advance(30)
    functions.submit(job_request("j", cluster=CLUSTER))
    functions.heartbeat(heartbeat("j", "CLAIMED", 1, vm=VM))  # the recreated VM's agent
    functions.heartbeat(heartbeat("j", "RUNNING", 2, vm=VM))
    _see(zen, clock, 30, second)  # its segment opens: after the claim
    _see(zen, clock, 1800, second)
    functions.heartbeat(heartbeat("j", "SUCCEEDED", 3, vm=VM, exit_code=0))
    with zen.db.transaction() as session:
        [row] = usage.attempts_of_job(session, "j")
    return row


def test_an_attempt_on_the_recreated_vm_is_priced_at_its_segments_price(config, db, publisher, clock, db_url,
                                                                          monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    _catalog(db, THEN, clock())
    zen, functions = _zen(config, db, publisher, clock, ["standard", "spot"])
    row = _claimed_by_the_recreated_vm(zen, functions, clock, db, "standard")
    assert (row["model"], row["usd_per_hour"]) == ("standard", LATER), row


def test_an_attempt_on_the_recreated_vm_is_priced_as_its_model(config, db, publisher, clock, db_url, monkeypatch):
    """The models reordered while the first VM ran: the MIG recreated it from the spot template."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    _catalog(db, THEN, clock())
    zen, functions = _zen(config, db, publisher, clock, ["standard", "spot"])
    row = _claimed_by_the_recreated_vm(zen, functions, clock, db, "spot")
    assert (row["model"], row["usd_per_hour"]) == ("spot", SPOT), row
