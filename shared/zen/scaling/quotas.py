"""The scale tick's look at Compute's GPU quotas (``zen.core.quotas``): each region's and the project's,
read afresh once a tick (``QuotaPort``: the room read is counted against the VMs listed then), and per cluster the
pools one more VM does not fit in. ``ClusterManager`` strikes such a pool as after a QUOTA_EXCEEDED,
without asking Compute for a VM it would refuse, and the BLOCK decision says which quota holds it back.
Where a quota has room for some of the cluster's VMs but fewer than a region's worth, the planner remembers
how many (``RegionMemory.quota_room``) and asks for no more there (:func:`left`): asked for more, Compute
refuses the rest with QUOTA_EXCEEDED, which strikes the pool, and a gang (all its VMs from one pool) that
asked there booted the part that fitted for nothing."""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Iterator, Mapping

from zen.core.config import ClusterConfig
from zen.core.quotas import ALL_REGIONS, Quota, Shortfall, gpu_metric, shortfall
from zen.scaling.model import Pool, RegionMemory
from zen.scaling.port import QuotaPort

log = logging.getLogger("zen.scaling")
PROJECT = ""  # the key of the project-wide quotas in ``read_quotas``' answer
UNLIMITED = 1 << 30  # ``left`` where no quota read holds a pool to fewer than a region's worth of VMs


def read_quotas(reader: QuotaPort, regions: list[str],
                map_: Callable[[Callable[[str], dict[str, Quota]], Iterable[str]], Iterator[dict[str, Quota]]]
                ) -> dict[str, dict[str, Quota]]:
    """Region (``PROJECT``: the project) -> its quotas by metric, read through ``map_`` (concurrently); a
    read that fails logs and holds nothing back (QUOTA_EXCEEDED from Compute still blocks the region)."""

    def read(region: str) -> dict[str, Quota]:
        try:
            return reader.region(region, fresh=True) if region else reader.project_wide(fresh=True)
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


def room(cluster: ClusterConfig, pool: Pool, quotas: dict[str, dict[str, Quota]]) -> int | None:
    """How many more of the cluster's VMs ``quotas`` leave room for in ``pool`` (its model's quota in its region,
    and all regions'), as :func:`held_back` counts them; None where neither is known."""
    free = [q.free for q in (quotas.get(pool.region, {}).get(gpu_metric(cluster.gpu_type, pool.model)),
                             quotas.get(PROJECT, {}).get(ALL_REGIONS)) if q is not None]
    return max(0, int(min(free) // cluster.gpu_count)) if free else None


def remember(memory: dict[str, RegionMemory], rooms: Mapping[str, int] | None,
             listed: Mapping[str, tuple[object, ...]]) -> dict[str, RegionMemory]:
    """The pools' memory after a quota read (``rooms``: pool -> VMs it has room for, where fewer than a region's
    worth; None: none read), with the VMs each pool listed then (``listed``: the quota counts those already)."""
    if rooms is None:
        return memory
    return {pool: m if m.quota_room is None and pool not in rooms else m.replaced(
        quota_room=rooms.get(pool), quota_listed=len(listed.get(pool, ()))) for pool, m in memory.items()}


def left(memory: RegionMemory, count: int) -> int:
    """VMs the last quota read leaves room for in a pool that holds ``count`` now (listed or asked for): its
    room then, less the VMs it holds more than it listed then (more, if it holds fewer); ``UNLIMITED`` where
    that read found room for a region's worth."""
    return UNLIMITED if memory.quota_room is None else memory.quota_room - (count - memory.quota_listed)


def no_room(memory: Mapping[str, RegionMemory], pools: Iterable[str], held: Callable[[str], int]) -> str:
    """A held job's reason's part for the ``pools`` whose last quota read leaves no room for the VMs they hold
    (``held``: listed or asked for): empty if none."""
    full = [pool for pool in pools if left(memory[pool], held(pool)) <= 0]
    return f"; the last GPU quota read leaves no room for more in {', '.join(full)}" if full else ""


def check_quotas(reader: QuotaPort, clusters: list[tuple[ClusterConfig, Mapping[str, Pool]]], regions: list[str],
                 map_: Callable[[Callable[[str], dict[str, Quota]], Iterable[str]], Iterator[dict[str, Quota]]]
                 ) -> list[tuple[dict[str, Shortfall], dict[str, int]]]:
    """For each (cluster, its pools), under the quotas of ``regions`` and the project, read once: ``held_back``
    (no room for one more VM), and the pools without room for a region's worth of the cluster's VMs
    (``max_vms_per_region``) with the VMs they have room for: asks there are held to it (:func:`left`), and a
    job gets no spare boot there (``Ranking.races_spare``: a spare refused for quota would strike its pool; with
    a region's worth of room, nothing the cluster asks there is refused)."""
    quotas = read_quotas(reader, regions, map_)
    return [(held_back(cluster, pools, quotas),
             {key: n for key, pool in pools.items() if (n := room(cluster, pool, quotas)) is not None
              and n < cluster.max_vms_per_region}) for cluster, pools in clusters]
