"""The scale tick's look at Compute's GPU quotas (``zen.core.quotas``): each region's and the project's,
read afresh once a tick (``QuotaPort``: the room read is counted against the VMs listed then), and per cluster the
pools one more VM does not fit in. ``ClusterManager`` strikes such a pool as after a QUOTA_EXCEEDED,
without asking Compute for a VM it would refuse, and the BLOCK decision says which quota holds it back.
Where a quota has room for some of the cluster's VMs but fewer than its pools could ask there (a region's
worth each, ``max_vms`` at most), the planner remembers how many (``RegionMemory.quota_room``) and asks for no
more there (:func:`left`): asked for more, Compute refuses the rest with QUOTA_EXCEEDED, which strikes the pool, and a gang (all its VMs from one pool) that
asked there booted the part that fitted for nothing. A quota is shared: a region's spot and flex-start pools both
count against its PREEMPTIBLE_<GPU>_GPUS, and every pool against GPUS_ALL_REGIONS, so the room of a quota one
read found short is counted down by what every pool under it asks (:func:`left`): each pool given the whole of
it asked Compute for more than it holds, and the refused part struck the pools as after a QUOTA_EXCEEDED. Clusters
of one GPU type share the quotas too: the tick checks each against the read less what those it planned before asked
for (:class:`TickQuotas`), in the order of their most urgent queued jobs (:func:`planning_order`); and the memory of
each planned before another is then held to the room those after it left (:meth:`TickQuotas.settle`)."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Callable, Collection, Iterable, Iterator, Mapping, Sequence

from zen.core.config import ClusterConfig
from zen.core.quotas import ALL_REGIONS, Quota, Shortfall, gpu_metric, shortfall
from zen.scaling.model import Action, Decision, Pool, RegionMemory, Vm, VmPhase
from zen.scaling.port import FleetPort, QuotaPort

log = logging.getLogger("zen.scaling")
PROJECT = ""  # the key of the project-wide quotas in ``read_quotas``' answer
UNLIMITED = 1 << 30  # ``left`` where no quota read holds a pool to fewer VMs than its pools could ask


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


def shares(cluster: ClusterConfig, pool: Pool, quotas: dict[str, dict[str, Quota]],
           pools: Iterable[Pool] = ()) -> tuple[tuple[str, int], ...]:
    """The quotas ``pool`` counts against (its model's in its region, and all regions') that leave room for fewer
    of the cluster's VMs than the ``pools`` under each (``pool`` among them) could ask: a region's worth each, the
    cluster's ``max_vms`` at most (GPUS_ALL_REGIONS with room for a region's worth, each of three regions was asked
    for one, and Compute refused what went past it). (The quota's name, as every pool under it names it; that room.)"""
    metric, pools = gpu_metric(cluster.gpu_type, pool.model), [*pools] or [pool]
    regional = sum(p.region == pool.region and gpu_metric(cluster.gpu_type, p.model) == metric for p in pools)
    named = ((f"{metric} in {pool.region}", quotas.get(pool.region, {}).get(metric), max(1, regional)),
             (ALL_REGIONS, quotas.get(PROJECT, {}).get(ALL_REGIONS), len(pools)))
    return tuple((name, n) for name, q, under in named if q is not None and (n := max(0, int(
        q.free // cluster.gpu_count))) < min(cluster.max_vms, under * cluster.max_vms_per_region))


class Rooms(dict[str, int]):
    """Pool -> the VMs a quota read leaves room for, where fewer than its pools could ask (the least of its
    ``shares``); ``shared``: pool -> those shares, which the pools' memory keeps (``RegionMemory.quota_shared``);
    ``unread``: the pools whose region's or the project's quotas this read could not read (it found room in
    nothing there, and lifts no block of theirs: :func:`lift`)."""

    def __init__(self, shared: dict[str, tuple[tuple[str, int], ...]], unread: frozenset[str] = frozenset()):
        super().__init__({pool: min(n for _, n in found) for pool, found in shared.items() if found})
        self.shared = {pool: found for pool, found in shared.items() if found}
        self.unread = unread


def remember(memory: dict[str, RegionMemory], rooms: Mapping[str, int] | None,
             listed: Mapping[str, tuple[Vm, ...]]) -> dict[str, RegionMemory]:
    """The pools' memory after a quota read (``rooms``: pool -> VMs it has room for, where fewer than its pools
    could ask, and, of ``Rooms``, the quotas shared; None: none read), with the VMs each pool listed then that the
    quota counts already (``listed``: not one still waiting for capacity, which holds no GPU yet: counted as listed,
    it took the quota's room unseen once it got capacity)."""
    if rooms is None:
        return memory
    shared = getattr(rooms, "shared", {})
    return {pool: m if m.quota_room is None and pool not in rooms else m.replaced(
        quota_room=rooms.get(pool), quota_listed=sum(vm.phase is not VmPhase.BOOTING or vm.started
                                                     for vm in listed.get(pool, ())), quota_shared=shared.get(pool, ()))
        for pool, m in memory.items()}


def left(memory: Mapping[str, RegionMemory], pool: str, held: Callable[[str], int]) -> int:
    """VMs the last quota read leaves room for in ``pool`` (``held``: what a pool holds now, listed or asked for):
    of each quota it counts against, that quota's room then less what every pool under it grew by (the VMs it holds
    more than it listed then; fewer: the quota's room grew, whichever pool's VMs went); ``UNLIMITED`` where that
    read found room for what its pools could ask. (A pool's room was held to its own growth: another's VMs gone
    gave the quota's room to that pool alone.) Memory written before quotas were kept: its own room."""
    m = memory[pool]
    if m.quota_room is None:
        return UNLIMITED
    grown = {key: held(key) - other.quota_listed for key, other in memory.items() if other.quota_room is not None}
    under = [room - sum(grown[key] for key, other in memory.items() if key in grown and any(
        named == name for named, _ in other.quota_shared)) for name, room in m.quota_shared]
    return min(under) if under else m.quota_room - grown[pool]


def short(memory: RegionMemory, per_region: int) -> bool:
    """Whether the last quota read left a pool room for fewer than a region's worth (``per_region``) of the cluster's
    VMs: it gets no spare boot, nor is it asked again with its region's dearer pool (a shared quota with room for
    more than that is tracked all the same, :func:`left`, and turned spares off everywhere under it)."""
    return memory.quota_room is not None and memory.quota_room < per_region


def lift(memory: dict[str, RegionMemory], rooms: Mapping[str, int] | None, now: datetime,
         unread: Collection[str] = ()) -> list[Decision]:
    """The blocks the tick's quota read laid (``RegionMemory.quota_block`` "read") on pools this pass's fresh read
    (``rooms``, ``ClusterManager.quota_room``; None: none this pass) finds room in again: lifted (a VM of the cluster gone frees its GPUs; the pool stayed blocked up to
    ``max_block_s`` while jobs waited). So are those after Compute's QUOTA_EXCEEDED naming GPU quotas the read
    counts ("refused:<quotas>"): another cluster of the GPU type took their room between two reads, and its VMs
    gone, the pool waited out the block. One after a QUOTA_EXCEEDED naming no such quota stays: Compute counts
    quotas Zen does not read; so does a pool whose MIG this pass could not read, or whose quotas this read could
    not (``unread``: it was unblocked, and asked for VMs of its ``min_vms``; ``Rooms.unread``: a failed read found
    room in nothing, and lifted a refusal's block every tick, the pool struck again by the same refusal)."""
    if rooms is None:
        return []
    lifted, unread = [], {*unread, *getattr(rooms, "unread", ())}
    for pool, m in memory.items():
        if (pool not in unread and m.quota_block.startswith(("read", "refused:")) and m.blocked_until is not None
                and m.blocked_until > now and m.quota_room != 0):
            memory[pool] = m.replaced(blocked_until=None, quota_block="")
            lifted.append(Decision(Action.UNBLOCK, pool, "the tick's GPU quota read finds room for more again"))
    return lifted


def no_room(memory: Mapping[str, RegionMemory], pools: Iterable[str], held: Callable[[str], int]) -> list[str]:
    """The ``pools`` whose last quota read leaves no room for more than the VMs they hold (``held``: listed or
    asked for): a held job's reason names them (``zen.scaling.probes.held_reason``)."""
    return [pool for pool in pools if memory[pool].quota_room is not None and left(memory, pool, held) <= 0]  # (else unlimited)


class TickQuotas:
    """The tick's one read (``read_quotas``), handed to its clusters' passes in turn (:meth:`check`), each
    cluster's room counted down by what those planned before it in that tick asked for (:meth:`took`): clusters of
    one GPU type draw on the same quotas (4xa100-40gb and 8xa100-40gb on NVIDIA_A100_GPUS), and each given the
    whole of a room was asked for it, Compute refusing the later one's VMs with QUOTA_EXCEEDED, which struck its
    pool while its jobs waited, their VMs asked for elsewhere only at a later pass."""

    def __init__(self, reader: QuotaPort, regions: list[str], map_: Callable[
            [Callable[[str], dict[str, Quota]], Iterable[str]], Iterator[dict[str, Quota]]]):
        self.read = read_quotas(reader, regions, map_)
        self.left = {key: dict(found) for key, found in self.read.items()}  # the read, less this tick's asks

    def check(self, cluster: ClusterConfig, pools: Mapping[str, Pool]) -> tuple[dict[str, Shortfall], Rooms]:
        """``held_back`` by the read itself (no room for one more VM: struck as after a QUOTA_EXCEEDED), and the
        pools under a quota without room for what they could ask (a region's worth each, ``max_vms_per_region``;
        ``max_vms`` at most), with the VMs they have room for, of what the clusters planned before left: asks
        there are held to it (:func:`left`), and a job gets no spare boot there (``Ranking.races_spare``: a spare
        refused for quota would strike its pool; with room for what its pools could ask, nothing the cluster asks
        there is refused)."""
        read, left = self.read, self.left
        return held_back(cluster, pools, read), Rooms({
            key: shares(cluster, pool, left, pools.values()) for key, pool in pools.items()}, frozenset(
            key for key, pool in pools.items() if not read.get(pool.region) or not read.get(PROJECT)))

    def took(self, cluster: ClusterConfig, pools: Mapping[str, Pool], added: Mapping[str, int]) -> None:
        """A cluster's pass added ``added`` (pool -> VMs): their GPUs count against the quotas of their pools."""
        for key, count in added.items():
            if (pool := pools.get(key)) is None or count <= 0:
                continue
            for scope, metric in ((pool.region, gpu_metric(cluster.gpu_type, pool.model)), (PROJECT, ALL_REGIONS)):
                if (quota := self.left.get(scope, {}).get(metric)) is not None:
                    self.left[scope][metric] = replace(quota, usage=quota.usage + count * cluster.gpu_count)

    def settle(self, fleet: FleetPort, planned: Sequence[Planned], now: datetime) -> None:
        """The memory of each cluster planned before another that asked for VMs in the tick (``planned``: in turn,
        each with the VMs its pass added, in that room already), its pools' room held to what those after it left
        (``held``): kept from its own pass, the room would be the read's whole, and its passes between two ticks (a
        submission's) would ask for the VMs another cluster's took, refused by Compute with QUOTA_EXCEEDED."""
        took = [i for i, (_, _, added) in enumerate(planned) if added]
        for cluster, pools, added in planned[:took[-1]] if took else ():
            try:
                with fleet.cluster_lock(cluster.name) as locked:  # else a pass holds it: its own read is as old
                    if locked and (memory := self.held(cluster, pools, fleet.memory(cluster.name), added)):
                        fleet.record(cluster.name, memory, [], now)
            except Exception as exc:  # noqa: BLE001 - logged; the next tick reads the quotas again
                log.warning("could not keep the room other clusters left", extra={"cluster": cluster.name,
                                                                                  "error": str(exc)})

    def held(self, cluster: ClusterConfig, pools: Mapping[str, Pool], memory: Mapping[str, RegionMemory],
             added: Mapping[str, int]) -> dict[str, RegionMemory]:
        """``memory`` (a cluster's, as its pass of the tick left it, adding ``added``) where this tick's asks left a
        pool of it less room than it keeps (:func:`left`): every pool's room now, and the VMs listed then with those
        added (a pool kept as it is would count its adds as growth against the quotas it shares with the others,
        whose room holds them already: given room for one more VM, it would find none)."""
        def listed(key: str) -> int:  # the VMs its pass listed with capacity (as ``remember`` counts), and its adds
            m = memory[key]
            return len(m.known) - len(m.booting) + len(m.started) + added.get(key, 0)

        found = {key: shares(cluster, pool, self.left, pools.values()) for key, pool in pools.items() if key in memory}
        rooms = {key: min(n for _, n in under) for key, under in found.items() if under}
        if not any(memory[key].quota_room is None or room < left(memory, key, listed) for key, room in rooms.items()):
            return {}
        return {key: memory[key].replaced(quota_room=room, quota_listed=listed(key), quota_shared=found[key])
                for key, room in rooms.items()}


Planned = tuple[ClusterConfig, Mapping[str, Pool], Mapping[str, int]]  # a cluster the tick planned, its pools, adds


def planning_order(clusters: Sequence[ClusterConfig], heads: Callable[[list[str]], Mapping[str, tuple[int, datetime]]]
                   | None) -> list[ClusterConfig]:
    """The clusters in the order the tick plans them, each taking what the quotas' room the ones before it left
    (:class:`TickQuotas`): by their most urgent queued job (``heads``: cluster -> its highest priority and oldest
    job's queued_at at it, ``zen.store.fleet.queue_heads``; None: no quotas read), the highest priority first, then
    the oldest; clusters with none queued after, ties in the configuration's order. In the configuration's order,
    the cluster listed first took a short quota's room at every tick, and an older job of higher priority of one
    listed after it waited while the first one's newer jobs of lower priority got VMs. Clusters are ordered, not
    their jobs: the one planned first asks for all its jobs, those of lower priority than another cluster's too."""
    if heads is None or len(clusters) < 2:
        return list(clusters)
    try:
        found = heads([c.name for c in clusters])
    except Exception as exc:  # noqa: BLE001 - logged; planned in the configuration's order
        log.warning("could not read the clusters' queued jobs", extra={"error": str(exc)})
        return list(clusters)
    queued = sorted((c for c in clusters if c.name in found), key=lambda c: (-found[c.name][0], found[c.name][1]))
    return queued + [c for c in clusters if c.name not in found]
