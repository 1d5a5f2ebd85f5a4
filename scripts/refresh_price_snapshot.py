"""Rebuild the committed price snapshot (shared/zen/core/price_snapshot.json) from the Cloud Billing
Catalog API, through Zen's adapter (zen.adapters.billing) and the official client.

    python scripts/refresh_price_snapshot.py [--config zen.yaml ...] [--regions r1,r2] [--all-shapes]
                                             [--endpoint http://127.0.0.1:8088] [--out PATH]

Prices every machine type the committed snapshot prices and those of the given configurations (default: the
shipped default and demo ones; with --all-shapes, every shape the adapter knows) in the snapshot's regions and
theirs (or --regions), for spot, standard and flex-start: a refresh drops no machine type the snapshot priced
(a pricing.catalog: false configuration, or ZEN_PRICES=snapshot, relies on it), only what the catalog no longer
lists (and, with --regions, the other regions). Needs credentials the client finds (Application Default Credentials) and the Cloud Billing
API enabled, or --endpoint for a stand-in (zen_dev.local.billing). A flex-start price the catalog does
not list in a region is the standard one x the share the machine type's flex-start prices are of its standard
ones where the catalog lists both (an a3-highgpu's: 0.433), else x FLEX_START_SHARE, said so in the header.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "shared"))

from zen.adapters.billing import catalog_client, fetch_prices  # noqa: E402
from zen.core.config import DEFAULT_CONFIG_PATH, load_config  # noqa: E402
from zen.core.prices import SHAPES, SNAPSHOT_PATH, load_snapshot  # noqa: E402

FLEX_START_SHARE = 0.55  # an a2-highgpu-1g's DWS Defined Duration SKUs: -45 % of standard (us-central1, 2026-08-02)
CONFIGS = (DEFAULT_CONFIG_PATH, ROOT / "shared" / "zen_dev" / "demo" / "zen-demo.yaml")


def build(machines: list[str], regions: list[str], endpoint: str | None, now: datetime) -> dict:
    table = fetch_prices(catalog_client(endpoint), machines, regions, now)
    prices: dict[str, dict[str, dict[str, float]]] = {}
    filled = []
    for (machine, region, model), price in sorted(table.prices.items()):
        prices.setdefault(machine, {}).setdefault(region, {})[model] = price.usd_per_hour
    for machine, by_region in prices.items():  # the catalog's own share where it lists flex-start elsewhere
        listed = [models["flex-start"] / models["standard"] for models in by_region.values()
                  if "flex-start" in models and models.get("standard")]
        share = sum(listed) / len(listed) if listed else FLEX_START_SHARE
        for region, models in by_region.items():
            if "flex-start" not in models and "standard" in models:
                models["flex-start"] = round(models["standard"] * share, 6)
                filled.append(f"{machine} {region}")
    return {"header": {
        "fetched": now.date().isoformat(),
        "currency": "USD",
        "unit": "USD per VM-hour: vCPUs, memory and GPUs of the machine type, and the Local SSD a3 and a2-ultragpu machine types come with; no other disk, network, licence or discount",
        "source": ("Cloud Billing Catalog API, Compute Engine (services/6F81-5844-456A), read by "
                   "scripts/refresh_price_snapshot.py through zen.adapters.billing: vCPUs x core + GiB x RAM + "
                   "GPUs x GPU (+ GiB x Local SSD for a3 and a2-ultragpu) SKU prices of the machine family, per region and model"),
        "flex_start": ("the catalog's DWS Defined Duration SKUs; where it lists none in a region, standard x the share "
                       "they are of standard in the machine type's regions that list both, else x "
                       f"{FLEX_START_SHARE}"
                       + (f" ({len(filled)} machine type-regions)" if filled else "")),
        "refresh": "scripts/refresh_price_snapshot.py rebuilds this file from the Catalog API",
    }, "prices": prices}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, action="append", help="a configuration whose clusters to price")
    parser.add_argument("--regions", help="comma-separated regions (default: the configurations')")
    parser.add_argument("--all-shapes", action="store_true", help="every machine type the adapter knows")
    parser.add_argument("--endpoint", help="a Catalog stand-in, e.g. http://127.0.0.1:8088")
    parser.add_argument("--out", type=Path, default=SNAPSHOT_PATH)
    args = parser.parse_args(argv)
    clusters = [c for path in (args.config or CONFIGS) for c in load_config(path).clusters]
    held = load_snapshot().prices  # the committed one's: kept whatever the configurations name
    machines = sorted(SHAPES) if args.all_shapes else sorted({c.machine_type for c in clusters} | {k[0] for k in held})
    regions = (args.regions.split(",") if args.regions
               else sorted({r for c in clusters for r in c.regions} | {k[1] for k in held}))
    document = build(machines, regions, args.endpoint, datetime.now(timezone.utc))
    if not document["prices"]:
        print("the catalog priced none of those machine types; the snapshot is unchanged", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"{args.out}: {sum(len(m) for r in document['prices'].values() for m in r.values())} prices of "
          f"{len(document['prices'])} machine types in {len(regions)} regions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
