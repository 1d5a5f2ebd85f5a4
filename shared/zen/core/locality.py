"""Data locality: order a job's allowed regions by where its ``inputs`` live, and price the egress.

A bucket's location is the configuration's ``data.bucket_locations``, else looked up with the official
Cloud Storage client (cached for ``KEEP_ANSWER_S``; bounded by ``LOOKUP_TIMEOUT_S``, a failure retried after
``RETRY_UNKNOWN_S``).
``egress_usd`` prices reading the inputs from a region (``zen explain``; the planner's ranking: ``zen.scaling.egress``);
``nearest_regions`` are where a data job's start goes first (``zen.core.routing``); the locations' names:
``zen.core.storage_locations``. The distances and the order:
docs/how-to/data-placement.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from zen.core.config import ZenConfig
from zen.core.gcs import split_uri
from zen.core.models import InputSpec
from zen.core.storage_locations import DUAL_REGIONS, MULTI_REGIONS, continent as continent

log = logging.getLogger("zen.core.locality")
_looked_up: dict[str, str | None] = {}
_answered_at: dict[str, float] = {}  # bucket -> when Cloud Storage last answered (time.monotonic; none: kept as is)
_failed_at: dict[str, float] = {}  # bucket -> when its lookup last failed (time.monotonic)
_lock = threading.Lock()
RETRY_UNKNOWN_S = 300.0
# An answer is asked again after this: a bucket may be relocated, or deleted and created again (its name is free
# then) in another location, and one not found may be created since; kept for good, it placed jobs by the old one
# for as long as the process lived.
KEEP_ANSWER_S = 3600.0
LOOKUP_TIMEOUT_S = 5.0


def bucket_location(config: ZenConfig, bucket: str) -> str | None:
    configured = config.data.bucket_locations.get(bucket)
    if configured:
        return configured.lower()
    with _lock:
        now = time.monotonic()
        if bucket in _looked_up and now - _answered_at.get(bucket, now) < KEEP_ANSWER_S:
            return _looked_up[bucket]
        failed = _failed_at.get(bucket)
        if failed is not None and now - failed < RETRY_UNKNOWN_S:
            return _looked_up.get(bucket)
    try:
        import google.cloud.storage as storage

        found = storage.Client(project=config.project).lookup_bucket(bucket, timeout=LOOKUP_TIMEOUT_S, retry=None)
    except Exception as exc:  # noqa: BLE001 - no credentials, no network: unknown for now, asked again later
        log.info("bucket location unknown for now", extra={"bucket": bucket, "error": str(exc)})
        with _lock:
            _failed_at[bucket] = time.monotonic()
            return _looked_up.get(bucket)  # the last answer, if any, until the next one
    location = location_of(found)
    with _lock:
        _looked_up[bucket] = location
        _answered_at[bucket] = time.monotonic()
        _failed_at.pop(bucket, None)
    return location


def location_of(bucket: Any) -> str | None:
    """A looked-up bucket's location, lowercased: a region, a multi-region, a predefined dual-region (``nam4``), or a
    configurable dual-region's two regions joined by ``+`` (``us-east1+us-west1``). Cloud Storage names a configurable
    dual-region's location by the multi-region it lies in (``US``, its ``locationType`` ``dual-region``) and its regions
    in ``customPlacementConfig.dataLocations``: read as ``US``, every ``us-*`` region was as near as the other, and its
    own two were priced at the multi-region's rate."""
    if bucket is None or not bucket.location:
        return None
    regions = bucket.data_locations if (bucket.location_type or "").lower() == "dual-region" else None
    return "+".join(sorted(r.lower() for r in regions)) if regions else bucket.location.lower()


def distance(region: str, location: str | None) -> int | None:
    """0 same region (or one of a dual-region's two: ``nam4``, or ``us-east1+us-west1``), 1 same multi-region,
    2 same continent (``us-central1`` from ``us-east1``, ``northamerica-northeast1`` from ``us``), 3 elsewhere;
    None when the location is unknown."""
    if location is None:
        return None
    if location == region or region in DUAL_REGIONS.get(location, ()) or region in location.split("+"):
        return 0
    prefixes, outside = MULTI_REGIONS.get(location, ((), frozenset()))
    if region.startswith(prefixes) and region not in outside:
        return 1
    near = continent(region)
    return 2 if near is not None and near == continent(location) else 3


def _weighted(config: ZenConfig, inputs: Iterable[InputSpec] | None) -> list[tuple[float, str | None]]:
    return [(spec.size_gb if spec.size_gb is not None else 1.0, bucket_location(config, split_uri(spec.uri)[0]))
            for spec in inputs or ()]


def _cost(weighted: Sequence[tuple[float, str | None]], region: str) -> float:
    return sum(w * (distance(region, loc) or 0) for w, loc in weighted)


def order_by_data(config: ZenConfig, regions: list[str], inputs: Iterable[InputSpec] | None) -> list[str]:
    """``regions`` (in the cluster's order) sorted by their weighted distance to the inputs."""
    weighted = _weighted(config, inputs)
    if not weighted:
        return regions
    return sorted(regions, key=lambda r: (_cost(weighted, r), regions.index(r)))


def nearest_regions(config: ZenConfig, regions: list[str], inputs: Iterable[InputSpec] | None) -> list[str]:
    """The regions of ``regions`` nearest the inputs (the least weighted distance), where a job's start
    goes first (``zen.core.routing``); [] when that would change nothing: no input of a known location, the
    located inputs weigh less than ``data.route_min_gb``, or every region is as near as the others."""
    located = [(w, loc) for w, loc in _weighted(config, inputs) if loc is not None]
    if not located or sum(w for w, _ in located) < config.data.route_min_gb:
        return []
    costs = {r: _cost(located, r) for r in regions}
    nearest = [r for r in regions if costs[r] == min(costs.values())]
    return nearest if len(nearest) < len(regions) else []


def egress_usd(config: ZenConfig, region: str, inputs: Iterable[InputSpec] | None
               ) -> tuple[float, float, float] | None:
    """(GB of input that would cross into ``region``, their price, GB in buckets of unknown location: not priced,
    neither crossing nor free), or None without inputs."""
    weighted = _weighted(config, inputs)
    if not weighted:
        return None
    rates = config.data.egress_usd_per_gb
    price = (rates.same_region, rates.same_multi_region, rates.continental, rates.other)
    known = [(w, d) for w, loc in weighted if (d := distance(region, loc)) is not None]
    return (sum(w for w, d in known if d > 0), sum(w * price[d] for w, d in known),
            sum(w for w, loc in weighted if loc is None))
