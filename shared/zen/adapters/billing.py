"""GPU VM prices from the Cloud Billing Catalog API, through its official client
(``google.cloud.billing_v1.CloudCatalogClient.list_skus`` on Compute Engine, ``services/6F81-5844-456A``).

GCE prices a GPU VM by its parts: vCPUs x its machine family's core price + GiB x the family's RAM price +
GPUs x the GPU's price + the GiB of Local SSD an a3 or a2-ultragpu machine type comes with x the Local SSD
price (``zen.core.prices.vm_price``). The catalog lists each part as one SKU per provisioning model, with the
regions it applies to in ``service_regions``; the description says what it is, e.g. ``A2 Instance Core
running in Americas``, ``Spot Preemptible A2 Instance Ram running in Belgium``, ``DWS Defined Duration A2
Core running in ...`` (flex-start, Dynamic Workload Scheduler), ``Nvidia Tesla A100 GPU running in
Americas``, ``Nvidia L4 GPU attached to Spot Preemptible VMs running in ...``, ``SSD backed Local Storage``
(``... in Paris``, ``... attached to Spot Preemptible VMs``, ``DWS Defined Duration SSD backed Local Storage
running in ...``). Commitments, reservations, Calendar Mode, sole tenancy and custom shapes are not VM prices
here and are skipped. The unit price is the first tier's (``tiered_rates`` starting at 0), per hour for a
core or GPU, per GiB-hour for RAM; Local SSD is sold per GiB-month, read per GiB-hour at GCE's 730 hours a
month. A model without a Local SSD SKU of its own in a region (spot, flex-start) takes the region's standard
one: an upper bound, never a price without the disk.

Shapes it knows (``zen.core.prices.SHAPES``): a2-highgpu-{1,2,4,8}g and a2-megagpu-16g (A2 + Nvidia Tesla
A100), a2-ultragpu-{1,2,4,8}g (A2 Ultra, else A2, + Nvidia Tesla A100 80GB), g2-standard-{4,8,12,16,24,32,48,96} (G2 +
Nvidia L4), a3-highgpu-{1,2,4,8}g (A3 + Nvidia H100 80GB). Another machine type stays unpriced unless
the configuration prices it (``pricing.overrides``).

``ZEN_BILLING_ENDPOINT`` (``http://host:port``) points the client at a local stand-in
(``zen_dev.local.billing``) with anonymous credentials. The client library is imported only when a client
is built: the agent's wheel does not carry it (it is in requirements-functions.txt).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from zen.core.prices import SHAPES, Key, Price, PriceTable, Shape, vm_price

SERVICE = "services/6F81-5844-456A"  # Compute Engine
CALL_TIMEOUT_S = 60.0  # per page
PAGE_SIZE = 5000  # SKUs asked per page: Compute Engine's ~30k SKUs in a few calls
_SKIPPED = ("commitment", "reserved", "calendar mode", "sole tenancy", "custom", "premium", "upgrade", "local ssd")
_MODEL_PREFIX = (("Spot Preemptible ", "spot"), ("DWS Defined Duration ", "flex-start"))
# A family is one word ("A2") or more ("A2 Ultra": a2-ultragpu's own core and RAM SKUs).
_PART = re.compile(r"^(?P<family>[A-Z][0-9A-Za-z]*(?: [A-Z][a-z]+)*?)(?: Instance)? (?P<part>Core|Ram) running in ")
_GPU = re.compile(r"^(?P<gpu>Nvidia .+?) GPU (?:running in |attached to (?P<how>Spot Preemptible|DWS Defined "
                  r"Duration) VMs running in )")

# "... Storage", "... in Paris", "... running in Americas"; another "attached to ... VMs" is no price of these
_LOCAL_SSD = re.compile(r"^SSD backed Local Storage(?P<spot> attached to Spot Preemptible VMs)?(?:$| in | running in )")
HOURS_PER_MONTH = 730.0  # GCE's month, for a price per GiB-month (``usage_unit`` ``GiBy.mo``)

Part = tuple[str, str, str, str]  # (kind: core/ram/gpu/ssd, family or GPU name, region, model)


def catalog_client(endpoint: str | None = None) -> Any:
    """The official Catalog client; with ``endpoint`` (or ``ZEN_BILLING_ENDPOINT``), one talking REST to a
    local stand-in with anonymous credentials."""
    from google.cloud import billing_v1

    endpoint = endpoint or os.environ.get("ZEN_BILLING_ENDPOINT")
    if not endpoint:
        return billing_v1.CloudCatalogClient()
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.billing_v1.services.cloud_catalog.transports.rest import CloudCatalogRestTransport

    scheme, _, host = endpoint.rpartition("://")
    transport = CloudCatalogRestTransport(host=host, credentials=AnonymousCredentials(), url_scheme=scheme or "http")
    return billing_v1.CloudCatalogClient(transport=transport)


def classify(description: str) -> tuple[str, str, str] | None:
    """(kind, family or GPU name, model) of a SKU by its description; None for a SKU that is no part of a
    VM's price as Zen counts it."""
    lowered = description.lower()
    if any(word in lowered for word in _SKIPPED):
        return None
    gpu = _GPU.match(description)
    if gpu:
        how = gpu.group("how")
        return "gpu", gpu.group("gpu"), "spot" if how == "Spot Preemptible" else "flex-start" if how else "standard"
    model, rest = "standard", description
    for prefix, named in _MODEL_PREFIX:
        if description.startswith(prefix):
            model, rest = named, description[len(prefix):]
    ssd = _LOCAL_SSD.match(rest)
    if ssd:
        return "ssd", "Local SSD", "spot" if ssd.group("spot") else model
    part = _PART.match(rest)
    if part is None:
        return None
    return part.group("part").lower(), part.group("family"), model


def unit_price(sku: Any) -> float | None:
    """USD per unit of the SKU's current price, None when it lists none, names another currency (asked in USD,
    the catalog answers in USD: another is no price Zen can bill) or is free (a VM part at $0 would make its pool
    free, first in every ranking and billed nothing: ``pricing.overrides`` refuses 0 for that reason); a price
    per month (``usage_unit`` ending ``.mo``, Local SSD's GiB-month) per hour of it. Of tiers, the dearest (a
    free first tier, as a free usage allowance lists, is no price of the hours Zen runs: never below what GCE may
    bill)."""
    for info in sku.pricing_info:
        rates = info.pricing_expression.tiered_rates
        if rates:
            if any(getattr(rate.unit_price, "currency_code", "USD") not in ("USD", "") for rate in rates):
                return None
            usd = max(float(rate.unit_price.units) + rate.unit_price.nanos / 1e9 for rate in rates)
            monthly = str(getattr(info.pricing_expression, "usage_unit", "")).endswith(".mo")
            return usd / (HOURS_PER_MONTH if monthly else 1.0) if usd > 0 else None
    return None


def parts_of(skus: Iterable[Any], regions: set[str] | None = None) -> dict[Part, float]:
    """Every VM part the SKUs price, by (kind, family or GPU, region, model); only ``regions`` when given. A
    part two SKUs price in one region (the catalog lists us-east4 as "Virginia" and "Northern Virginia")
    takes the higher price: the same whatever order the pages come in, and never below what GCE may bill."""
    parts: dict[Part, float] = {}
    for sku in skus:
        what = classify(sku.description)
        if what is None:
            continue
        price = unit_price(sku)
        if price is None:
            continue
        kind, name, model = what
        for region in sku.service_regions:
            if regions is None or region in regions:
                key = (kind, name, region, model)
                parts[key] = max(price, parts.get(key, price))
    return parts


def vm_prices(parts: dict[Part, float], machine_types: Iterable[str], fetched_at: datetime) -> PriceTable:
    """The price of each known machine type in each region and model all its parts are priced in. A family of
    more words (``A2 Ultra``) without core and RAM SKUs of its own in a place takes its first word's; a model
    without a Local SSD SKU of its own there, the standard one."""
    places = {(region, model) for (_, _, region, model) in parts}
    prices: dict[Key, Price] = {}
    for machine in machine_types:
        shape: Shape | None = SHAPES.get(machine)
        if shape is None:
            continue
        for region, model in sorted(places):
            core, ram = next(((c, r) for family in dict.fromkeys((shape.family, shape.family.split()[0]))
                              if (c := parts.get(("core", family, region, model))) is not None
                              and (r := parts.get(("ram", family, region, model))) is not None), (None, None))
            gpu = parts.get(("gpu", shape.gpu, region, model))
            ssd = (next((p for m in (model, "standard") if (p := parts.get(("ssd", "Local SSD", region, m))) is not None),
                        None) if shape.local_ssd_gib else 0.0)
            if core is not None and ram is not None and gpu is not None and ssd is not None:
                prices[(machine, region, model)] = Price(round(vm_price(shape, core, ram, gpu, ssd), 6), "catalog",
                                                         fetched_at)
    return PriceTable(prices)


def fetch_prices(client: Any, machine_types: Iterable[str], regions: Iterable[str] | None,
                 fetched_at: datetime) -> PriceTable:
    """Read every Compute Engine SKU (the pager follows the pages) and price ``machine_types`` in
    ``regions`` (None: every region the catalog names). Raises what the client raises."""
    pager = client.list_skus(request={"parent": SERVICE, "currency_code": "USD", "page_size": PAGE_SIZE},
                             timeout=CALL_TIMEOUT_S)
    parts = parts_of(pager, set(regions) if regions is not None else None)
    return vm_prices(parts, machine_types, fetched_at)


def catalog_fetcher(clusters: list[Any], endpoint: str | None = None) -> Callable[[datetime], PriceTable]:
    """What the tick calls to fetch the prices of ``clusters``' machine types in their regions (``fetch(now)
    -> PriceTable``); the client is built on the first call, then kept."""
    machines = sorted({c.machine_type for c in clusters})
    regions = sorted({r for c in clusters for r in c.regions})
    client: list[Any] = []

    def fetch(now: datetime) -> PriceTable:
        if not client:
            client.append(catalog_client(endpoint))
        return fetch_prices(client[0], machines, regions, now)

    return fetch
