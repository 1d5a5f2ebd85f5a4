"""Gangs as demand (``DemandGroup.gang`` > 1: multi-node jobs, ``zen.core.gang``): each gang's VMs come
from one pool, never spread across regions, and a pool that can give only part of a gang is out for it.
The planner (``zen.scaling.planner``) calls these for gang groups; ordinary groups never come here, so
their plans are what they were. Pure.

A gang booted for starts at its N-th usable VM, so it waits for the slowest of the boots it needs. Each
gang that needs two or more boots gets one more in the same pool, its spare boot (:class:`SpareBoots`),
and starts at its N-th of N+1: with lognormal boots (median 90 s, sigma 0.3), the p95 of a 4-node gang's
wait for its boots falls from about 176 s (the slowest of 4) to about 138 s (the 4th of 5). Spare boots
are asked for after every job's first ask and hedge (they never take a place a job of their cluster needs), where the
limits leave room, never in flex-start pools (``Ranking.spares``). A gang covered by booting VMs keeps
one more booting while it waits, and a gang no node has claimed yet, whose first pool is uncertain (the
planner hedged it), keeps a whole copy booting in another pool (its hedge, with its spare) racing too, as
long as no demand waits for a place (:meth:`SpareBoots.kept`); before, the pass after a hedge ended it as
a lost race as soon as any VM nearby became usable, one that serves another job included. Once the gang
is whole (its first claim fixes its region, so the copy's pool is out of it), or demand waits for a
place, nothing covers them and the planner's ``cancel_losers`` ends them as lost races (unbilled if not
yet RUNNING), or, usable, they serve the queue like any VM. A spare's own failure to get capacity is a
stockout like any VM's: the pool is blocked, and its boots no longer count for the gang.
Measured: docs/benchmarks/simulator.md#gangs."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, MutableMapping, Sequence

from zen.scaling.flexrun import Queued
from zen.scaling.model import DemandGroup


class SpareBoots:
    """The pass's spare boots for gangs: ``allowed(pool)`` says where a gang gets one; ``keep`` the pools
    where a gang covered by booting VMs keeps one more booting (``match``), ``copies`` the other pools where
    an unclaimed gang's hedge copy may race on (where ``hedged(pool)``: its first pool is one the planner
    hedges), ``want`` the pools where one more is to be asked for (``ask``, ``hedge``), ``asked`` how many
    were (per pool, for the plan's reasons)."""

    def __init__(self, allowed: Callable[[str], bool], hedged: Callable[[str], bool] = lambda pool: False):
        self.allowed, self.hedged = allowed, hedged
        self.keep: list[str] = []
        self.want: list[str] = []
        self.asked: dict[str, int] = defaultdict(int)
        self.copies: list[tuple[list[str], int]] = []  # (other pools, N): an unclaimed gang's hedge copy

    def kept(self, booting_left: dict[str, int]) -> None:
        """After the asks, when no demand waits for a place: one booting VM per gang in ``keep``, and a whole
        gang's worth (and its spare) in the first of a copy's other pools that has them, of those no queued
        job needs (``booting_left``, the planner's), are counted as the gang's, so ``cancel_losers`` leaves
        them in the race. (While demand waits for a place, places are worth more than a sooner gang start:
        they are left to ``cancel_losers``, and go once a boot beats them.)"""
        for region in self.keep:
            if booting_left.get(region, 0) > 0:
                booting_left[region] -= 1
        for others, need in self.copies:  # a whole copy booting in another pool races on until a part is claimed
            if (pool := next((r for r in others if booting_left.get(r, 0) >= need), None)) is not None:
                booting_left[pool] -= min(booting_left[pool], need + int(self.allowed(pool)))  # and its spare

    def grant(self, room: Callable[[str], int], add: dict[str, int]) -> None:
        """After every first ask and hedge: one VM more per gang in ``want``, where the limits leave room."""
        for region in self.want:
            if room(region) > 0:
                add[region] = add.get(region, 0) + 1
                self.asked[region] += 1


def match(group: DemandGroup, ranked: list[str], pools: tuple[dict[str, int], ...],
          idle_needed: MutableMapping[str, int], spares: SpareBoots | None = None, queued: Queued | None = None,
          late: bool = False) -> int:
    """Cover each gang of ``group`` with the idle, then running, then pending VMs of the first pool
    (in ``ranked`` order) that has enough for the whole gang; returns the VMs left uncovered (whole gangs,
    asked for by ``ask``). ``pools``: (idle, running, pending) per pool, taken from in place. A gang covered
    by booting VMs where ``spares`` allows one may keep a spare (``SpareBoots.kept``: a booting VM no job
    needs, its own spare or, the same to it, another). Of a flex-start pool's resize requests still queued
    (``queued``) a gang counts one that holds all it lacks, or none (``late``: past its bound, with another
    pool to take: ``Queued.for_gang``)."""
    left = 0
    for need in group.chunks():
        granted = {r: pools[0].get(r, 0) + pools[1].get(r, 0) for r in ranked}
        region = next((r for r in ranked if granted[r] + _counted(pools, 2, r, need - granted[r], queued, late)
                       >= need), None)
        if region is None:
            left += need
            continue
        need_whole, booting = need, need - min(need, pools[0].get(region, 0))
        for index, pool in enumerate(pools):
            take = min(need, _counted(pools, index, region, need, queued, late))
            if take:
                _took(queued, index, pool, region, take)
                pool[region] -= take
                need -= take
                if index == 0:
                    idle_needed[region] += take
        if spares is not None and booting and spares.allowed(region):
            spares.keep.append(region)
        if spares is not None and booting and need_whole == group.gang and spares.hedged(region):  # unclaimed
            spares.copies.append(([r for r in ranked if r != region], need_whole))
    return left


def ask(group: DemandGroup, left: int, ranked: list[str], room: Callable[..., int],
        add: dict[str, int], held: MutableMapping[str, int], spare: tuple[dict[str, int], ...] = (),
        idle_needed: MutableMapping[str, int] | None = None, booting_left: MutableMapping[str, int] | None = None,
        together: dict[str, list[int]] | None = None, spares: SpareBoots | None = None,
        queued: Queued | None = None, at_limit: list[int] | None = None) -> list[tuple[str, int]]:
    """Ask for each uncovered gang (``left`` VMs of ``group``) in one pool that can hold all of it: its
    spare VMs (``spare``: idle, running, pending that no job took, as ``match`` left them) plus the room
    left. The pool with the most spare VMs goes first (an idle VM there claims a part as soon as the start
    comes, and the gang then assembles in that region), ties in ``ranked`` order; only the rest is asked
    for, and a spare wanted where the gang needs two or more boots and ``spares`` allows one. A gang no
    pool can hold waits (``held``, with why). Returns (pool, the gang's VMs), per gang asked for (its hedge
    is the whole gang: another pool has none of its VMs); each ask is a unit of ``together`` too
    (``Plan.together``: its VMs come whole or not at all; a spare is none). A flex-start pool's requests still
    queued (``queued``) count for no pool's choice (``match`` found none that holds the gang, or the gang is past
    its bound), but a gang that asks in that pool all the same takes one that holds all it lacks (its own, left
    by ``match`` for being late: asked again, a request of the whole gang was added every pass). A gang held
    only by ``max_vms`` (``room(pool, capped=False)`` has room for it) adds the VMs it needs to ``at_limit``:
    places probes of stocked-out pools give it (none did: it waited as long as their stockouts lasted)."""
    asked = []
    for need in DemandGroup(group.regions, left, group.oldest, group.priority, gang=group.gang, part=group.part).chunks():
        def supply(region: str) -> int:
            return sum(_counted(spare, index, region, need, queued, late=True) for index in range(len(spare)))

        fits = [r for r in ranked if supply(r) + room(r) >= need]
        region = max(fits, key=supply) if fits else None  # the most spare (the fewest to boot), then by rank
        if region is None:
            held[f"no allowed pool has room for the {need} VM(s) a gang of {group.gang} needs (max_vms_per_region, "
                 f"max_vms, the last GPU quota read)"] += 1  # one job (a HOLD counts jobs; it counted VMs)
            if at_limit is not None and any(supply(r) + room(r, capped=False) >= need for r in ranked):
                at_limit.append(need)
            continue
        whole, boots = need, need - min(need, spare[0].get(region, 0)) if spare else need
        for index, pool in enumerate(spare):  # the spare VMs first: idle, then booting
            take = min(need, _counted(spare, index, region, need, queued, late=False))
            if take:
                _took(queued, index, pool, region, take)
                pool[region] -= take
                need -= take
                if index == 0 and idle_needed is not None:
                    idle_needed[region] += take
                elif index > 0 and booting_left is not None:
                    booting_left[region] -= take
        if need and boots >= 2 and spares is not None and spares.allowed(region):
            spares.want.append(region)
        if need:
            add[region] = add.get(region, 0) + need
            asked.append((region, whole))
            if together is not None:
                together.setdefault(region, []).append(need)
    return asked


def wanted(vms: int, gangs: Sequence[int], shared: bool = False) -> str:
    """Why a pool is asked for ``vms`` VMs, ``gangs`` of them (each gang's VMs) for gangs: jobs and gangs each
    counted as one (a gang's VMs were counted as that many jobs). ``shared``: the demand counts VMs that hold several
    queued jobs each (``ClusterLimits.shared``), so it is said in VMs (four jobs two per VM read "2 queued job(s)")."""
    jobs, parts = vms - sum(gangs), []
    if jobs:
        parts.append(f"{jobs} VM(s) for queued jobs, several per VM" if shared else f"{jobs} queued job(s) without a VM")
    if gangs:
        parts.append(f"{sum(gangs)} VM(s) for {len(gangs)} queued gang(s)")
    return ", ".join(parts)


def waiting(count: int, shared: bool) -> str:
    """A HOLD's count, in jobs, or in the VMs they would need where several share one (``wanted``)."""
    return f"queued jobs for {count} VM(s) wait" if shared else f"{count} job(s) wait"


def _counted(pools: tuple[dict[str, int], ...], index: int, region: str, rest: int, queued: Queued | None,
             late: bool) -> int:
    """The VMs of ``pools[index]`` (idle, running, pending) in ``region`` a gang lacking ``rest`` may count: of the
    pending ones in a flex-start pool, those granted and one queued request at most (``Queued.for_gang``)."""
    have = pools[index].get(region, 0)
    return have if queued is None or index < 2 else queued.for_gang(region, have, rest, late)


def _took(queued: Queued | None, index: int, pool: dict[str, int], region: str, take: int) -> None:
    """A gang took ``take`` of ``pool``'s VMs in ``region``, as ``_counted`` counted them (before it takes them)."""
    if index == 2 and queued is not None:
        queued.used(region, pool[region], take)


def hedge(others: list[str], need: int, room: Callable[[str], int], add: dict[str, int],
          hedges: MutableMapping[str, int], together: dict[str, list[int]] | None = None,
          spares: SpareBoots | None = None) -> None:
    """A hedge for a gang whose first pool is uncertain: the whole gang again, in the first of ``others``
    with room for all of it (none: no hedge), its spare wanted as ``ask`` wants one; a unit of ``together``
    as its first ask is."""
    region = next((r for r in others if room(r) >= need), None)
    if region is not None:
        if need >= 2 and spares is not None and spares.allowed(region):
            spares.want.append(region)
        add[region] = add.get(region, 0) + need
        hedges[region] += need
        if together is not None:
            together.setdefault(region, []).append(need)
