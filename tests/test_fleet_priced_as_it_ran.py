"""The fleet's dollars (``zen usage --by region``) are what GCE billed: each VM at the price of its machine type,
region and model while it ran. They were priced at today's prices, so the catalog's next daily refresh (a spot price
moved) or an override set later repriced every VM of the window, while the attempts those VMs ran kept the price of
their end: a VM that ran a job for its whole life then cost more (or less) than the job on it. Each billed segment
of a MIG instance keeps the price of its pool when a scaling pass first saw it billed."""

from __future__ import annotations

import json
from datetime import timedelta

from tests.scaling.fakes import RecordingMig
from zen.cli import main as cli
from zen.core.prices import Price, PriceTable
from zen.scaling.manager import ClusterOrchestrator
from zen.scaling.port import MigInstance
from zen.store import prices

CLUSTER = "4xa100-40gb"  # a2-highgpu-4g in us-central1, standard first
VM = f"zen-{CLUSTER}-us-central1-ab12"
THEN, NOW = 3600.0, 7200.0  # the catalog's price per VM-hour while the VM ran, and after the next refresh


def _catalog(db, usd: float, at) -> None:
    with db.transaction() as session:
        prices.store(session, PriceTable({("a2-highgpu-4g", "us-central1", "standard"): Price(usd, "catalog", at)}), at)


def one_vm_running(config, db, clock, vm: str) -> ClusterOrchestrator:
    """A scaler of ``CLUSTER`` whose us-central1 MIG lists ``vm`` RUNNING (its other regions' none)."""
    listed = [MigInstance(vm, "us-central1-a", "NONE", "RUNNING", None)]

    def mig(project, region, name, model):
        return RecordingMig(region, [], target=1 if region == "us-central1" and name.endswith("us-central1")
                            else 0, instances=listed if name == config.cluster(CLUSTER).mig_name("us-central1") else [])

    return ClusterOrchestrator(config, db, clock, mig)


def test_a_vm_that_ran_before_a_price_change_costs_the_price_it_ran_at(config, db, db_url, clock, capsys, monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    start = clock()
    _catalog(db, THEN, start)
    scaler = one_vm_running(config, db, clock, VM)
    scaler.scale(CLUSTER)  # the VM RUNNING
    clock.advance(60)
    scaler.scale(CLUSTER)  # its last sight so far: a minute billed
    _catalog(db, NOW, start + timedelta(days=1))  # the next day's refresh: the price moved

    assert cli.main(["usage", "--since", (start - timedelta(hours=1)).isoformat(), "--by", "region", "--json"]) == 0
    central = {g["region"]: g for g in json.loads(capsys.readouterr().out)["groups"]}["us-central1"]
    assert central["fleet_usd"] == round(60 * THEN / 3600, 2)  # 60.0, not 120.0 at the later price
