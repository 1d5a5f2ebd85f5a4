"""Flex-start prices of the committed snapshot against the catalog's flex-start SKUs ("DWS Defined Duration"), read
through the official client from a stand-in serving them as the Catalog's REST API does."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from zen.adapters.billing import catalog_client, fetch_prices
from zen.core.prices import load_snapshot
from zen_dev.local.billing import CatalogStandIn, serve

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
AMERICAS = ["us-central1", "us-west1"]

# An a3-highgpu VM's flex-start SKUs in the Americas as a public Catalog readout listed them (SKU ids 341A-49A5-0C07,
# 9A32-36B2-7FBC, ED19-A584-4A84, 2303-1D6A-9C08): (description, usage unit, USD per unit, resource group)
A3_FLEX_START = [
    ("Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in Americas", "h", 4.200761, "GPU"),
    ("DWS Defined Duration A3 Core running in Americas", "h", 0.010934, "CPU"),
    ("DWS Defined Duration A3 Ram running in Americas", "GiBy.h", 0.000952, "RAM"),
    ("DWS Defined Duration SSD backed Local Storage running in Americas", "GiBy.mo", 0.08, "LocalSSD"),
]


def _rest_sku(n: int, description: str, unit: str, usd: float, group: str) -> dict:
    units = int(usd)
    return {"name": f"services/6F81-5844-456A/skus/TEST-{n:04d}", "skuId": f"TEST-{n:04d}", "description": description,
            "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute", "resourceGroup": group,
                         "usageType": "OnDemand"},
            "serviceRegions": AMERICAS,
            "pricingInfo": [{"summary": "", "pricingExpression": {
                "usageUnit": unit, "displayQuantity": 1,
                "tieredRates": [{"startUsageAmount": 0, "unitPrice": {
                    "currencyCode": "USD", "units": str(units), "nanos": round((usd - units) * 1e9)}}]}}]}


@pytest.mark.parametrize("machine, vcpus, ram_gib, gpus, ssd_gib", [("a3-highgpu-1g", 26, 234, 1, 750),
                                                                    ("a3-highgpu-8g", 208, 1872, 8, 6000)])
def test_the_snapshots_a3_flex_start_price_is_what_its_flex_start_skus_bill(machine, vcpus, ram_gib, gpus, ssd_gib):
    """The snapshot priced every flex-start VM at its standard price x 0.55, an a2-highgpu-1g's discount; an a3's
    flex-start SKUs are 57 % below its standard ones: an a3-highgpu-8g in us-central1 was $48.67/h in the snapshot
    (planned and billed so without the catalog) where GCE bills $38.32/h."""
    server = serve(CatalogStandIn([_rest_sku(n, *sku) for n, sku in enumerate(A3_FLEX_START)], page_size=2))
    try:
        table = fetch_prices(catalog_client(f"http://127.0.0.1:{server.server_address[1]}"), [machine], AMERICAS, NOW)
    finally:
        server.shutdown()
    billed = vcpus * 0.010934 + ram_gib * 0.000952 + gpus * 4.200761 + ssd_gib * 0.08 / 730
    snapshot = load_snapshot()
    for region in AMERICAS:
        priced = table.lookup(machine, region, "flex-start")
        assert priced is not None and priced.usd_per_hour == pytest.approx(billed, abs=1e-5), region
        held = snapshot.lookup(machine, region, "flex-start")
        assert held is not None and held.usd_per_hour == pytest.approx(billed, abs=1e-3), region


def test_a_refresh_prices_a3_flex_start_where_the_catalog_lists_none_at_the_a3s_own_share(tmp_path):
    """The catalog lists an a3-highgpu's flex-start SKUs in the Americas only: the refresh script priced its flex-start
    in us-east4 at standard x 0.55 (an a2-highgpu-1g's share), the 27 % too high price the snapshot had held, where
    the a3's own SKUs are 0.433 of standard (the committed snapshot's us-east4 price)."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT
    from zen_dev.local.billing import skus_from_snapshot

    held = json.loads((ROOT / "shared" / "zen" / "core" / "price_snapshot.json").read_text())["prices"]["a3-highgpu-8g"]
    document = {"prices": {"a3-highgpu-8g": {"us-central1": held["us-central1"],  # us-east4: no flex-start SKU
                                              "us-east4": {"standard": held["us-east4"]["standard"]}}}}
    server = serve(CatalogStandIn(skus_from_snapshot(document)))
    out = tmp_path / "snapshot.json"
    try:
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / "refresh_price_snapshot.py"), "--endpoint",
                               f"http://127.0.0.1:{server.server_address[1]}", "--regions", "us-central1,us-east4",
                               "--out", str(out)], capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    priced = load_snapshot(out).lookup("a3-highgpu-8g", "us-east4", "flex-start")
    assert priced is not None and priced.usd_per_hour == pytest.approx(held["us-east4"]["flex-start"], rel=1e-3)
