"""What a GPU VM costs: a price table (machine type, region, provisioning model) -> USD per VM-hour, where
each price came from, the ``pricing:`` configuration section, and GCE's billing arithmetic.

Sources, the later winning: the committed snapshot (``price_snapshot.json``, for offline use and the local
stack), the Cloud Billing Catalog (``zen.adapters.billing``, kept in Postgres by ``zen.store.prices`` and
refreshed by the scale tick once a day), then the configuration's overrides: ``pricing.usd_per_vm_hour``
(one price for a machine type in every region and model) and ``pricing.overrides`` (machine type ->
region -> model). A VM's price is its vCPUs x the core price + its GiB x the RAM price of its machine
family + its GPUs x the GPU price + the GiB of Local SSD its machine type comes with (a3, a2-ultragpu) x the Local
SSD price (``vm_price``; ``SHAPES`` says what each known machine type holds).

GCE bills a VM from RUNNING: a one-minute minimum, then per second (``billed_seconds``).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator

from zen.core.cluster_config import ClusterConfig, Number, Strict
from zen.core.provisioning import MODELS, check_model, pool_key
from zen.core.shapes import SHAPES as SHAPES, Shape as Shape  # re-exported: what each machine type holds

SNAPSHOT_PATH = Path(__file__).with_name("price_snapshot.json")
SOURCES = ("snapshot", "catalog", "override")  # in the order they are laid over each other
MAX_AGE_S = 24 * 3600  # catalog prices older than this are fetched again by the tick
_EPS = 1e-9
BILLING_MINIMUM_S = 60  # GCE bills a VM at least a minute of RUNNING


def billed_seconds(paid_s: float, minimum: bool = True) -> int:
    """GCE's billing of ``paid_s`` seconds of RUNNING: none for none, else a one-minute minimum (a VM's, not
    each job's on it: ``minimum`` False for a share of a VM's time) and per second after (a started second counts)."""
    if paid_s <= 0:
        return 0
    return max(BILLING_MINIMUM_S if minimum else 0, math.ceil(paid_s - _EPS))


def billed_usd(paid_s: float, usd_per_hour: float, minimum: bool = True) -> float:
    """What ``paid_s`` seconds of RUNNING cost at ``usd_per_hour``, billed as GCE bills (``billed_seconds``)."""
    return billed_seconds(paid_s, minimum) * usd_per_hour / 3600.0


def vm_price(shape: Shape, core: float, ram: float, gpu: float, local_ssd: float = 0.0) -> float:
    """USD per hour of a VM of ``shape`` at ``core`` per vCPU-hour, ``ram`` per GiB-hour, ``gpu`` per GPU-hour and
    ``local_ssd`` per GiB-hour of the Local SSD it comes with."""
    return shape.vcpus * core + shape.ram_gib * ram + shape.gpus * gpu + shape.local_ssd_gib * local_ssd


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    source: str  # one of SOURCES
    fetched_at: datetime | None = None  # when the catalog (or the snapshot) said so; None for an override


Key = tuple[str, str, str]  # (machine type, region, model)


@dataclass
class PriceTable:
    """Prices by (machine type, region, model); ``any_where``: a machine type's one price for every region
    and model (``pricing.usd_per_vm_hour``), which only an exact entry of a later source beats."""

    prices: dict[Key, Price] = field(default_factory=dict)
    any_where: dict[str, Price] = field(default_factory=dict)

    def lookup(self, machine_type: str, region: str, model: str) -> Price | None:
        exact = self.prices.get((machine_type, region, model))
        if exact is not None and exact.source == "override":
            return exact
        return self.any_where.get(machine_type) or exact

    def over(self, base: "PriceTable") -> "PriceTable":
        """This table laid over ``base``: its entries win."""
        return PriceTable({**base.prices, **self.prices}, {**base.any_where, **self.any_where})

    def oldest_fetch(self, source: str = "catalog") -> datetime | None:
        times = [p.fetched_at for p in self.prices.values() if p.source == source and p.fetched_at is not None]
        return min(times, default=None)


# not .inf nor .nan, not yes (YAML's true: $1.00/h), not 0 (free wins every ranking and every hedge)
_Usd = Annotated[Number[float], Field(gt=0, allow_inf_nan=False)]


class Pricing(Strict):
    """The ``pricing:`` section: where prices come from, and the prices you set yourself."""

    catalog: bool = Field(default=True, description=(
        "Read the Cloud Billing Catalog (refreshed daily by the tick); false: the committed snapshot only"))
    overrides: dict[str, dict[str, dict[str, _Usd]]] = Field(default_factory=dict, description=(
        "Machine type -> region -> model (spot, standard, flex-start) -> USD per VM-hour; wins over the rest"))
    usd_per_vm_hour: dict[str, _Usd] = Field(default_factory=dict, description=(
        "Machine type -> USD per VM-hour in every region and model (wins over the catalog and snapshot)"))

    @field_validator("overrides")
    @classmethod
    def _known_models(cls, value: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
        for machine, regions in value.items():
            for region, models in regions.items():
                for model in models:
                    check_model(model, f"{machine}.{region}")
        return value

    def table(self) -> PriceTable:
        """The configured prices as a table of source ``override``."""
        exact = {(m, r, mo): Price(usd, "override") for m, regions in self.overrides.items()
                 for r, models in regions.items() for mo, usd in models.items()}
        return PriceTable(exact, {m: Price(usd, "override") for m, usd in self.usd_per_vm_hour.items()})


def effective(pricing: Pricing, snapshot: PriceTable, catalog: PriceTable | None) -> PriceTable:
    """The prices Zen uses: the snapshot, the catalog's over it (unless ``pricing.catalog`` is false),
    the configuration's overrides over both."""
    base = catalog.over(snapshot) if catalog is not None and pricing.catalog else snapshot
    return pricing.table().over(base)


def catalog_pairs(clusters: list[ClusterConfig]) -> set[tuple[str, str]]:
    """The (machine type, region) of the clusters the catalog could price: machine types Zen knows the parts of
    (``SHAPES``; the catalog prices cores, memory and GPUs, not machine types). Another stays unpriced from the
    catalog, so its absence is no reason to read the catalog again within the day."""
    return {(c.machine_type, region) for c in clusters if c.machine_type in SHAPES for region in c.regions}


def pricing_problem(pricing: Pricing, clusters: list[ClusterConfig]) -> str | None:
    """Why ``pricing`` does not fit the ``clusters`` (None: it does), naming the field: a price set for a machine
    type that clusters with other GPUs attached share (an N1's: one price for both), an override for a
    machine type or region no cluster has (a typo would leave the price the user set unused), or, without
    the catalog, a pool of a cluster that neither the snapshot nor the overrides price."""
    regions: dict[str, set[str]] = {}
    gpus: dict[str, ClusterConfig] = {}  # machine type -> the first cluster of it: prices are per machine type
    for cluster in clusters:
        regions.setdefault(cluster.machine_type, set()).update(cluster.regions)
        first = gpus.setdefault(cluster.machine_type, cluster)  # (a known shape's machine type fixes its GPUs)
        priced = cluster.machine_type in pricing.usd_per_vm_hour or cluster.machine_type in pricing.overrides
        if priced and cluster.machine_type not in SHAPES and (first.gpu_type, first.gpu_count) != (cluster.gpu_type,
                                                                                                   cluster.gpu_count):
            return (f"clusters {first.name} and {cluster.name} share machine type {cluster.machine_type} with other "
                    f"GPUs ({first.gpu_count}x {first.gpu_type}, {cluster.gpu_count}x {cluster.gpu_type}): Zen prices "
                    "a VM by its machine type, so one would be ranked and billed at the other's price; give one of "
                    "them another machine type (an N1 of another size or memory)")
    machines = ", ".join(sorted(regions)) or "none"
    for machine, by_region in pricing.overrides.items():
        if machine not in regions:
            return f"pricing.overrides.{machine}: no cluster has machine type {machine} (the clusters': {machines})"
        for region in by_region:
            if region not in regions[machine]:
                return (f"pricing.overrides.{machine}.{region}: no cluster of machine type {machine} runs in {region} "
                        f"(theirs: {', '.join(sorted(regions[machine]))})")
    for machine in pricing.usd_per_vm_hour:
        if machine not in regions:
            return f"pricing.usd_per_vm_hour.{machine}: no cluster has machine type {machine} (the clusters': {machines})"
    if pricing.catalog:
        return None
    table = effective(pricing, snapshot(), None)
    for cluster in clusters:
        for region in cluster.regions:
            for model in cluster.provisioning:
                if table.lookup(cluster.machine_type, region, model) is None:
                    return (f"pricing.catalog is false and the price snapshot has no {cluster.machine_type} in "
                            f"{region} ({model}; cluster {cluster.name}): give it in pricing.overrides."
                            f"{cluster.machine_type}.{region}.{model} (USD per VM-hour), or read the catalog")
    return None


def load_snapshot(path: Path = SNAPSHOT_PATH) -> PriceTable:
    """The committed snapshot (``scripts/refresh_price_snapshot.py`` writes it) as a table of source
    ``snapshot``; ``fetched_at`` is its header's ``fetched`` date."""
    return snapshot_table(json.loads(path.read_text()))


def snapshot_table(document: dict[str, Any]) -> PriceTable:
    fetched = datetime.fromisoformat(document["header"]["fetched"])
    prices: dict[Key, Price] = {}
    for machine, regions in document["prices"].items():
        for region, models in regions.items():
            for model, usd in models.items():
                check_model(model, f"prices.{machine}.{region}")
                prices[(machine, region, model)] = Price(float(usd), "snapshot", fetched)
    return PriceTable(prices)


def pool_prices(table: PriceTable, cluster: ClusterConfig) -> dict[str, Price | None]:
    """Each pool of ``cluster`` (``zen.core.provisioning.pool_key``) -> its VM's price, None when unpriced."""
    primary = cluster.provisioning[0]
    return {pool_key(r, m, primary): table.lookup(cluster.machine_type, r, m)
            for r in cluster.regions for m in cluster.provisioning}


@functools.cache
def snapshot() -> PriceTable:
    """The committed snapshot, read once a process."""
    return load_snapshot()


@dataclass(frozen=True)
class AttemptPrice:
    """What an attempt that ends now is priced at, as its usage row keeps it (``zen.store.usage``). ``vms``: each
    VM it held (a gang's nodes, rank order), the model its name gives under today's configuration
    (``model_of_vm``), and its share of the attempt's VM-time. The row's statement reads each VM's model, and the
    price kept with it, from the billed segment the scaling passes saw the attempt start in (a primary pool's VM
    names no model; migration 0056: what the fleet's dollars bill that VM at, so a price refreshed while the attempt
    ran does not reprice it); for a VM no pass saw billed, or a segment kept unpriced, the name's model priced now:
    ``fixed`` (a configured override) wins, else the catalog's stored price (looked up in the row's own statement
    where ``catalog``), else the snapshot's (``fallback``). The attempt's price per VM-hour is its VMs' weighted by
    their shares, unpriced where any VM's model is, and its model rank 0's."""

    vms: tuple[tuple[str, str, float], ...]
    fixed: dict[str, float]
    catalog: bool
    fallback: dict[str, float]

    @property
    def model(self) -> str:
        """The model the VM names give rank 0's VM (the fleet's record may say otherwise: see the class)."""
        return self.vms[0][1]


def attempt_price(pricing: Pricing, cluster: ClusterConfig, vms: list[tuple[str | None, float]],
                  region: str | None) -> AttemptPrice | None:
    """The price of an attempt of ``cluster`` in ``region`` ending now, on ``vms`` (each with its share of the
    attempt's VM-time); None without a VM or region. Every model is priced, not only those the cluster lists
    now: a VM may have run as one the configuration has since dropped."""
    held = [(vm, share) for vm, share in vms if vm]
    if not held or not region:
        return None
    machine, tables = cluster.machine_type, {"fixed": pricing.table(), "fallback": snapshot()}
    found = {name: {m: p.usd_per_hour for m in MODELS if (p := table.lookup(machine, region, m)) is not None}
             for name, table in tables.items()}
    return AttemptPrice(tuple((vm, model_of_vm(cluster, vm, region), share) for vm, share in held),
                        found["fixed"], pricing.catalog, found["fallback"])


def model_of_vm(cluster: ClusterConfig, vm: str, region: str) -> str:
    """The provisioning model a VM of ``cluster`` in ``region`` ran as, from its name: ``<MIG name>-xxxx``
    where each pool's MIG is ``ClusterConfig.mig_name(region, model)``. A VM of the primary MIG (or of no
    pool's MIG: a legacy name) ran as the cluster's first model."""
    base = vm.rpartition("-")[0]
    for model in cluster.provisioning[1:]:
        if base == cluster.mig_name(region, model):
            return model
    return cluster.provisioning[0]

