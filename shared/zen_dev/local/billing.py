"""A Cloud Billing Catalog stand-in: the REST path the official client's ``list_skus`` calls
(``GET /v1/services/6F81-5844-456A/skus``, paged by ``pageSize``/``pageToken``), serving Compute Engine
SKUs built from a price snapshot (``zen.core.prices``; by default the committed one). Point the client at
it with ``ZEN_BILLING_ENDPOINT=http://HOST:PORT`` (``zen.adapters.billing.catalog_client``); run alone with
``python -m zen_dev.local.billing --port N``.

The snapshot holds whole-VM prices; the catalog sells parts. For each machine family, region and model
the stand-in prices a core, a GiB of RAM (an eighth of a core: its own split, not GCE's) and a GPU so that
every machine type of the snapshot costs what the snapshot says: from two shapes with different GPUs per
vCPU when the snapshot has them, else with the GPUs carrying 80 % of the price, after the Local SSD an a3 or
a2-ultragpu comes with (``LOCAL_SSD_GIB_MONTH``, sold per GiB-month as GCE sells it). ``fail_next`` makes the
next calls answer 503 (a catalog outage), ``calls`` counts the list calls.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from zen.adapters.billing import HOURS_PER_MONTH
from zen.core.prices import SHAPES, SNAPSHOT_PATH, Shape

SKUS_PATH = "/v1/services/6F81-5844-456A/skus"
RAM_SHARE = 0.125  # a GiB-hour costs this much of a vCPU-hour (the stand-in's split)
GPU_SHARE = 0.8
# USD per GiB-month of Local SSD by model (the stand-in's; GCE lists its own per region)
LOCAL_SSD_GIB_MONTH = {"standard": 0.08, "spot": 0.048, "flex-start": 0.08}
_LOCAL_SSD = {"standard": "SSD backed Local Storage running in",
              "spot": "SSD backed Local Storage attached to Spot Preemptible VMs running in",
              "flex-start": "DWS Defined Duration SSD backed Local Storage running in"}
_WHO = {"standard": ("", "running in"), "spot": ("Spot Preemptible ", "attached to Spot Preemptible VMs running in"),
        "flex-start": ("DWS Defined Duration ", "attached to DWS Defined Duration VMs running in")}


def _solve(shapes: list[tuple[Shape, float]]) -> tuple[float, float]:
    """(core, GPU) prices that make every (shape, price) hold, a GiB costing RAM_SHARE of a core."""
    rows = [(s.vcpus + RAM_SHARE * s.ram_gib, float(s.gpus), p) for s, p in shapes]
    a1, b1, p1 = rows[0]
    for a2, b2, p2 in rows[1:]:
        det = a1 * b2 - a2 * b1
        if abs(det) > 1e-9:
            return (p1 * b2 - p2 * b1) / det, (a1 * p2 - a2 * p1) / det
    return (1 - GPU_SHARE) * p1 / a1, GPU_SHARE * p1 / b1


def _money(usd: float) -> dict[str, Any]:
    units = int(usd)
    return {"currencyCode": "USD", "units": str(units), "nanos": round((usd - units) * 1e9)}


def _sku(n: int, description: str, region: str, unit: str, usd: float, group: str, usage: str) -> dict[str, Any]:
    return {
        "name": f"services/6F81-5844-456A/skus/STAND-IN-{n:04d}", "skuId": f"STAND-IN-{n:04d}",
        "description": f"{description} {region}",
        "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute", "resourceGroup": group,
                     "usageType": usage},
        "serviceRegions": [region],
        "pricingInfo": [{"summary": "", "pricingExpression": {
            "usageUnit": unit, "displayQuantity": 1,
            "tieredRates": [{"startUsageAmount": 0, "unitPrice": _money(usd)}]}}],
        "serviceProviderName": "Google",
    }


def skus_from_snapshot(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Catalog SKUs (REST JSON) pricing every known machine type of the snapshot ``document``. A region is
    named by itself where GCE says e.g. "Americas": the adapter reads ``serviceRegions``, not the words."""
    groups: dict[tuple[str, str, str, str], list[tuple[Shape, float]]] = {}
    for machine, regions in document["prices"].items():
        shape = SHAPES.get(machine)
        if shape is None:
            continue
        for region, models in regions.items():
            for model, usd in models.items():
                ssd = shape.local_ssd_gib * LOCAL_SSD_GIB_MONTH[model] / HOURS_PER_MONTH
                groups.setdefault((shape.family, shape.gpu, region, model), []).append((shape, float(usd) - ssd))
    skus: list[dict[str, Any]] = []
    for (family, gpu, region, model), shapes in sorted(groups.items()):
        core, gpu_usd = _solve(shapes)
        prefix, attached = _WHO[model]
        usage = "Preemptible" if model == "spot" else "OnDemand"
        for description, unit, usd, group in (
                (f"{prefix}{family} Instance Core running in", "h", core, "CPU"),
                (f"{prefix}{family} Instance Ram running in", "GiBy.h", core * RAM_SHARE, "RAM"),
                (f"{gpu} GPU {attached}", "h", gpu_usd, "GPU")):
            skus.append(_sku(len(skus), description, region, unit, usd, group, usage))
        skus.append(_sku(len(skus), f"Commitment v1: {family} Cpu for 1 Year running in", region, "h",
                         core / 2, "CPU", "Commit1Yr"))  # not a VM price: the adapter must skip it
    for region, model in sorted({(region, model) for (_, _, region, model) in groups}):
        skus.append(_sku(len(skus), _LOCAL_SSD[model], region, "GiBy.mo", LOCAL_SSD_GIB_MONTH[model], "LocalSSD",
                         "Preemptible" if model == "spot" else "OnDemand"))
    return skus


class CatalogStandIn:
    """The stand-in's state: its SKUs, a page size, outages to play, the calls it answered."""

    def __init__(self, skus: list[dict[str, Any]], page_size: int = 7):
        self.skus = skus
        self.page_size = page_size
        self.fail_next = 0
        self.calls = 0
        self._lock = threading.Lock()

    @classmethod
    def from_snapshot(cls, path: Path = SNAPSHOT_PATH, page_size: int = 7) -> "CatalogStandIn":
        return cls(skus_from_snapshot(json.loads(path.read_text())), page_size)

    def page(self, token: str, size: int) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.calls += 1
            if self.fail_next > 0:
                self.fail_next -= 1
                return 503, {"error": {"code": 503, "message": "the catalog stand-in plays an outage",
                                       "status": "UNAVAILABLE"}}
        start = int(token or 0)
        size = min(size or self.page_size, self.page_size)
        end = start + size
        body: dict[str, Any] = {"skus": self.skus[start:end]}
        if end < len(self.skus):
            body["nextPageToken"] = str(end)
        return 200, body


def _handler(state: CatalogStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path != SKUS_PATH:
                code, body = 404, {"error": {"code": 404, "message": f"no such path {url.path}", "status": "NOT_FOUND"}}
            else:
                code, body = state.page(query.get("pageToken", ""), int(query.get("pageSize", 0) or 0))
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def serve(state: CatalogStandIn, port: int = 0, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Start serving ``state`` in a daemon thread; ``server.server_address[1]`` is the port."""
    server = ThreadingHTTPServer((host, port), _handler(state))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="billing-stand-in", daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m zen_dev.local.billing", description="a Cloud Billing Catalog stand-in")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--snapshot", type=Path, default=SNAPSHOT_PATH)
    args = parser.parse_args(argv)
    server = serve(CatalogStandIn.from_snapshot(args.snapshot), args.port)
    try:  # the line too: a Ctrl-C as soon as it is read may land within its print
        print(f"ZEN_BILLING_ENDPOINT=http://127.0.0.1:{server.server_address[1]}", flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:  # Ctrl-C: stopped quietly, as the other stand-ins stop
        pass


if __name__ == "__main__":
    main()
