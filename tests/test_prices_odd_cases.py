"""Prices Zen knows, as the catalog may list them and as users read them: a free tier or a $0 part is no price (a
free VM won every ranking and billed nothing; a free first tier made an a2-highgpu-4g cost its cores alone); a VM is
billed in `zen usage`'s fleet at the machine type its attempts recorded (a cluster's machine type changed since
repriced it)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from tests.messages import agent_run, job_request
from zen.adapters.billing import catalog_client, fetch_prices
from zen.cli import main as cli
from zen.core.config import ZenConfig
from zen.core.prices import SNAPSHOT_PATH, load_snapshot
from zen_dev.local.billing import CatalogStandIn, serve, skus_from_snapshot

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _catalog_prices(edit) -> dict:
    skus = skus_from_snapshot(json.loads(SNAPSHOT_PATH.read_text()))
    for sku in skus:
        edit(sku)
    server = serve(CatalogStandIn(skus))
    try:
        client = catalog_client(f"http://127.0.0.1:{server.server_address[1]}")
        table = fetch_prices(client, ["a2-highgpu-4g"], ["us-central1", "us-west1"], NOW)
    finally:
        server.shutdown()
    return {k: v.usd_per_hour for k, v in table.prices.items()}


def test_a_tiered_gpu_sku_whose_first_tier_is_free_does_not_make_the_vm_cost_its_cores_alone():
    """A SKU whose tiered_rates start with a $0 tier (a free allowance) and then its price: its price is the dearest
    tier's (read as the first's, the A100s cost nothing and an a2-highgpu-4g in us-central1 was $2.94/h, not $14.69/h)."""
    def edit(sku):
        if sku["description"] == "Nvidia Tesla A100 GPU running in us-central1":
            expr = sku["pricingInfo"][0]["pricingExpression"]
            priced = expr["tieredRates"][0]["unitPrice"]
            expr["tieredRates"] = [{"startUsageAmount": 0, "unitPrice": {"currencyCode": "USD", "units": "0"}},
                                   {"startUsageAmount": 744, "unitPrice": priced}]

    price = _catalog_prices(edit).get(("a2-highgpu-4g", "us-central1", "standard"))
    snapshot = load_snapshot().lookup("a2-highgpu-4g", "us-central1", "standard").usd_per_hour
    assert price is None or price == pytest.approx(snapshot, rel=1e-3), price


def test_a_catalog_price_of_zero_is_not_taken_as_a_free_vm():
    """pricing.overrides refuses 0 ("free wins every ranking and every hedge"); so does the catalog's read: parts at
    $0 for one region's spot VMs leave it unpriced there (they were stored as a $0.00 VM, ranked first, billed nothing)."""
    def edit(sku):
        if sku["serviceRegions"] == ["us-west1"] and (sku["description"].startswith("Spot Preemptible A2 ")
                                                      or sku["description"].startswith("Nvidia Tesla A100 GPU attached to Spot")):
            sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"] = {"currencyCode": "USD"}

    prices = _catalog_prices(edit)
    assert prices.get(("a2-highgpu-4g", "us-west1", "spot"), 1.0) > 0, prices


def test_the_fleet_of_a_cluster_whose_machine_type_changed_is_billed_as_the_vms_that_ran(
        functions, zen, config, clock, monkeypatch, capsys):
    """1xl4's VM ran an hour as g2-standard-8 (its job's attempt recorded so); the cluster then moved to
    g2-standard-16. zen usage --by region prices the fleet's past VM-hour at g2-standard-8's price, as GCE billed it
    (it used g2-standard-16's)."""
    from zen.scaling.fleetdb import FleetDb

    fleetdb = FleetDb(zen.db, {c.name: c for c in zen.config.clusters})
    start = clock()
    fleetdb.see_instances("1xl4", {"us-central1": ["vm-a"]}, start)
    functions.submit(job_request("job-1", cluster="1xl4"))
    for beat in agent_run("job-1", vm="vm-a"):
        functions.heartbeat(beat)
        clock.advance(300)
    fleetdb.see_instances("1xl4", {"us-central1": ["vm-a"]}, start + timedelta(hours=1))

    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == "1xl4":
            cluster["machine_type"] = "g2-standard-16"
    moved = ZenConfig.model_validate(raw)
    monkeypatch.setattr("zen.core.config.load_config", lambda *a, **k: moved)
    assert cli.main(["usage", "--since", "2025-12-01", "--by", "region", "--json"]) == 0
    [central] = [g for g in json.loads(capsys.readouterr().out)["groups"] if g["region"] == "us-central1"]
    snapshot = load_snapshot()
    g2_8 = snapshot.lookup("g2-standard-8", "us-central1", "standard").usd_per_hour
    g2_16 = snapshot.lookup("g2-standard-16", "us-central1", "standard").usd_per_hour
    assert central["usd"] == round(g2_8 * 900 / 3600, 2)  # the attempt: its own machine type, kept
    assert central["fleet_usd"] == round(g2_8, 2), (central, round(g2_16, 2))
