"""An attempt's dollars are its share of its VM's: each VM it held is priced as that VM's billed segment is (the price
its pool had when a scaling pass first saw the VM billed, migration 0056), as the fleet's dollars are. An attempt was
priced at the price of its end: the catalog's daily refresh (a spot price moved) while it ran repriced the whole
attempt, and a VM that ran one job for its whole life cost (in ``zen usage --by region``) half what the job on it
did, the VM's cost no longer split among its jobs (docs/explanations/accounting.md)."""

from __future__ import annotations

import json
from datetime import timedelta

from tests.messages import heartbeat, job_request
from tests.test_claims_by_recorded_model import CLUSTER, _zen
from zen.cli import main as cli
from zen.core.prices import Price, PriceTable
from zen.store import fleet, prices, usage

VM = f"zen-{CLUSTER}-us-central1-ab12"  # the primary (standard) MIG's
THEN, LATER = 3600.0, 7200.0  # the catalog's price per VM-hour when the VM began, and after the refresh


def _catalog(db, usd: float, at) -> None:
    with db.transaction() as session:
        prices.store(session, PriceTable({("a2-highgpu-4g", "us-central1", "standard"): Price(usd, "catalog", at)}), at)


def _seen(zen, clock) -> None:
    """A scaling pass lists the VM billed, its pool priced from the catalog (``FleetDb._price``)."""
    with zen.db.transaction() as session:
        fleet.see_instances(session, CLUSTER, "us-central1", [VM], clock(), model="standard",
                            price=fleet.PoolPrice("a2-highgpu-4g", None, True, None))


def test_an_attempt_across_a_price_refresh_costs_what_its_vm_did(config, db, publisher, clock, db_url, capsys,
                                                                  monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    start = clock()
    _catalog(db, THEN, start)
    zen, functions = _zen(config, db, publisher, clock, ["standard", "spot"])
    _seen(zen, clock)  # billed from now, at THEN
    functions.submit(job_request("whole", cluster=CLUSTER))
    functions.heartbeat(heartbeat("whole", "CLAIMED", 1, vm=VM))
    functions.heartbeat(heartbeat("whole", "RUNNING", 2, vm=VM))
    clock.advance(1800)
    _catalog(db, LATER, clock())  # the next day's refresh, halfway through the job
    _seen(zen, clock)
    clock.advance(1800)
    _seen(zen, clock)  # the VM's last sight: it ran the job alone, an hour
    functions.heartbeat(heartbeat("whole", "SUCCEEDED", 3, vm=VM, exit_code=0))
    with zen.db.transaction() as session:
        [row] = usage.attempts_of_job(session, "whole")
    assert (row["ended_at"] - row["started_at"]).total_seconds() == 3600, row

    assert cli.main(["usage", "--since", (start - timedelta(hours=1)).isoformat(), "--by", "region", "--json"]) == 0
    central = {g["region"]: g for g in json.loads(capsys.readouterr().out)["groups"]}["us-central1"]
    assert (central["usd"], central["fleet_usd"]) == (3600.0, 3600.0), central
    assert row["usd_per_hour"] == THEN, row
