"""The scale tick's look at Compute's GPU quotas (``zen.core.quotas``): each region's and the project's,
read at most once a tick (``QuotaPort``; the adapter keeps each answer a minute), and per cluster the
pools one more VM does not fit in. ``ClusterManager`` strikes such a pool as after a QUOTA_EXCEEDED,
without asking Compute for a VM it would refuse, and the BLOCK decision says which quota holds it back."""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Iterator, Mapping

from zen.core.config import ClusterConfig
from zen.core.quotas import Quota, Shortfall, shortfall
from zen.scaling.model import Pool
from zen.scaling.port import QuotaPort

log = logging.getLogger("zen.scaling")
PROJECT = ""  # the key of the project-wide quotas in ``read_quotas``' answer


def read_quotas(reader: QuotaPort, regions: list[str],
                map_: Callable[[Callable[[str], dict[str, Quota]], Iterable[str]], Iterator[dict[str, Quota]]]
                ) -> dict[str, dict[str, Quota]]:
    """Region (``PROJECT``: the project) -> its quotas by metric, read through ``map_`` (concurrently); a
    read that fails logs and holds nothing back (QUOTA_EXCEEDED from Compute still blocks the region)."""

    def read(region: str) -> dict[str, Quota]:
        try:
            return reader.region(region) if region else reader.project_wide()
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.warning("could not read GPU quotas", extra={"region": region or "all", "error": str(exc)})
            return {}

    keys = [*regions, PROJECT]
    return dict(zip(keys, map_(read, keys)))


def held_back(cluster: ClusterConfig, pools: Mapping[str, Pool], quotas: dict[str, dict[str, Quota]],
              vms: int = 1) -> dict[str, Shortfall]:
    """Pool -> the quota that leaves no room for ``vms`` more of the cluster's VMs there."""
    return {key: short for key, pool in pools.items()
            if (short := shortfall(cluster.gpu_type, cluster.gpu_count * vms, pool.region,
                                   (pool.model,), quotas.get(pool.region, {}),
                                   quotas.get(PROJECT, {}))) is not None}


def check_quotas(reader: QuotaPort, clusters: list[tuple[ClusterConfig, Mapping[str, Pool]]], regions: list[str],
                 map_: Callable[[Callable[[str], dict[str, Quota]], Iterable[str]], Iterator[dict[str, Quota]]]
                 ) -> list[tuple[dict[str, Shortfall], frozenset[str]]]:
    """For each (cluster, its pools), under the quotas of ``regions`` and the project, read once: ``held_back``
    (no room for one more VM), and the pools without room for a region's worth of the cluster's VMs
    (``max_vms_per_region``), where a job gets no spare boot (``Ranking.races_spare``: a spare refused for
    quota would strike its pool; with that much room, nothing the cluster asks there is refused)."""
    quotas = read_quotas(reader, regions, map_)
    return [(held_back(cluster, pools, quotas),
             frozenset(held_back(cluster, pools, quotas, vms=cluster.max_vms_per_region))) for cluster, pools in clusters]
