"""What a demand group's inputs cost in egress read in each region of its pools, for the planner's ranking
(``zen.scaling.ranking``, ``DemandGroup.egress``). Priced as ``zen explain`` prices a job's
(``zen.core.locality.egress_usd`` at ``data.egress_usd_per_gb``; inputs in buckets of unknown location not priced),
summed over the group's jobs and divided by them: what one of its VMs' jobs costs on average (each node of a gang
stages every input: each of its VMs as much). A pass looks up no bucket (``known_location``): a lookup waits up to
``LOOKUP_TIMEOUT_S`` each, and a pass over 50 buckets of unknown location, or with Cloud Storage slow, would stall every
cluster's scaling behind them. Why and how it is weighed: docs/explanations/scaling.md (Prices, provisioning models and
preemptions: the egress of a job's inputs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Hashable, Iterable

from zen.core.config import ZenConfig
from zen.core.gcs import split_uri
from zen.core.locality import egress_usd
from zen.core.models import InputSpec
from zen.core.provisioning import region_of
from zen.scaling.model import DemandGroup


def known_location(config: ZenConfig, bucket: str) -> str | None:
    """``bucket``'s location as ``data.bucket_locations`` names it; None otherwise (not priced). A pass asks Cloud
    Storage nothing: a lookup waits up to 5 s (``zen.core.locality.bucket_location``), and 50 buckets of unknown
    location held every cluster's pass for minutes, inside its transaction."""
    configured = config.data.bucket_locations.get(bucket)
    return configured.lower() if configured else None


def weighs_inputs(config: ZenConfig | None) -> bool:
    """Whether a pass reads its queued jobs' inputs at all (``queued_demand``'s ``with_inputs``): only a configuration
    naming bucket locations has any to price; read for every queued job, 100,000 jobs of three inputs each took the
    demand's statement from 0.09 s to 0.7 s a cluster."""
    return config is not None and bool(config.data.bucket_locations)


class Inputs:
    """The rows of each demand group (by key): their jobs, and their inputs' GB by bucket."""

    def __init__(self) -> None:
        self._gb: dict[Hashable, dict[str, float]] = {}
        self._jobs: dict[Hashable, int] = {}

    def add(self, key: Hashable, jobs: int, inputs: Iterable[Any] | None) -> None:
        """A row of ``jobs`` jobs, ``inputs`` the input lists of those that name any (``queued_demand``'s)."""
        self._jobs[key] = self._jobs.get(key, 0) + jobs
        for listed in inputs or ():
            for spec in listed or ():
                bucket = split_uri(spec["uri"])[0]  # validated at submission
                size = spec.get("size_gb")
                gb = self._gb.setdefault(key, {})
                gb[bucket] = gb.get(bucket, 0.0) + (1.0 if size is None else float(size))

    def priced(self, config: ZenConfig, groups: tuple[DemandGroup, ...],
               key_of: Callable[[DemandGroup], Hashable]) -> tuple[DemandGroup, ...]:
        """``groups`` with their ``egress`` (``key_of(group)``: the key their rows were added under); a group whose
        jobs name no input unchanged (the same object)."""
        return tuple(self._priced(config, group, key_of(group)) for group in groups)

    def _priced(self, config: ZenConfig, group: DemandGroup, key: Hashable) -> DemandGroup:
        gb, jobs = self._gb.get(key), self._jobs.get(key, 0)
        if not gb or not jobs:
            return group
        specs = [InputSpec.model_construct(uri=f"gs://{bucket}", size_gb=size) for bucket, size in gb.items()
                 if known_location(config, bucket) is not None]  # (each known: egress_usd asks no one)
        if not specs:
            return group
        regions = dict.fromkeys(region_of(pool) for pool in group.regions)
        usd = {region: (egress_usd(config, region, specs) or (0.0, 0.0, 0.0))[1] / jobs for region in regions}
        return replace(group, egress=tuple(usd.items())) if any(usd.values()) else group
