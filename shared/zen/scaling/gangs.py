"""Gangs as demand (``DemandGroup.gang`` > 1: multi-node jobs, ``zen.core.gang``): each gang's VMs come
from one pool, never spread across regions, and a pool that can give only part of a gang is out for it.
The planner (``zen.scaling.planner``) calls these for gang groups; ordinary groups never come here, so
their plans are what they were. Pure.

A gang booted for starts at its N-th usable VM, so it waits for the slowest of the boots it needs. Each
gang that needs two or more boots gets one more in the same pool, its spare boot (:class:`SpareBoots`),
and starts at its N-th of N+1: with lognormal boots (median 90 s, sigma 0.3), the p95 of a 4-node gang's
wait for its boots falls from about 176 s (the slowest of 4) to about 138 s (the 4th of 5). Spare boots
are asked for after every job's first ask and hedge (they never take a place a job needs), where the
limits leave room, never in flex-start pools (``Ranking.spares``). A gang covered by booting VMs keeps
one more booting while it waits; once it is whole, no demand covers its spare and the planner's
``cancel_losers`` ends it (unbilled before RUNNING), or it serves the queue like any VM.
Measured: docs/benchmarks/simulator.md#gangs."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, MutableMapping

from zen.scaling.model import DemandGroup


class SpareBoots:
    """The pass's spare boots for gangs: ``allowed(pool)`` says where a gang gets one; ``keep`` the pools
    where a gang covered by booting VMs keeps one more booting (``match``), ``want`` those where one more is
    to be asked for (``ask``, ``hedge``), ``asked`` how many were (per pool, for the plan's reasons)."""

    def __init__(self, allowed: Callable[[str], bool]):
        self.allowed = allowed
        self.keep: list[str] = []
        self.want: list[str] = []
        self.asked: dict[str, int] = defaultdict(int)

    def kept(self, booting: tuple[dict[str, int], ...]) -> None:
        """After every group is matched: one booting VM (listed RUNNING first) per gang in ``keep``, where
        one is left, taken from ``booting`` so that ``cancel_losers`` leaves it in the race."""
        for region in self.keep:
            for pool in booting:
                if pool.get(region, 0) > 0:
                    pool[region] -= 1
                    break

    def grant(self, room: Callable[[str], int], add: dict[str, int]) -> None:
        """After every first ask and hedge: one VM more per gang in ``want``, where the limits leave room."""
        for region in self.want:
            if room(region) > 0:
                add[region] = add.get(region, 0) + 1
                self.asked[region] += 1


def match(group: DemandGroup, ranked: list[str], pools: tuple[dict[str, int], ...],
          idle_needed: MutableMapping[str, int], spares: SpareBoots | None = None) -> int:
    """Cover each gang of ``group`` with the idle, then running, then pending VMs of the first pool
    (in ``ranked`` order) that has enough for the whole gang; returns the VMs left uncovered (whole gangs,
    asked for by ``ask``). ``pools``: (idle, running, pending) per pool, taken from in place. A gang covered
    by booting VMs where ``spares`` allows one keeps its spare (``SpareBoots.kept``)."""
    left = 0
    for need in group.chunks():
        region = next((r for r in ranked if sum(pool.get(r, 0) for pool in pools) >= need), None)
        if region is None:
            left += need
            continue
        booting = need - min(need, pools[0].get(region, 0))
        for index, pool in enumerate(pools):
            take = min(need, pool.get(region, 0))
            if take:
                pool[region] -= take
                need -= take
                if index == 0:
                    idle_needed[region] += take
        if spares is not None and booting and spares.allowed(region):
            spares.keep.append(region)
    return left


def ask(group: DemandGroup, left: int, ranked: list[str], room: Callable[[str], int],
        add: dict[str, int], held: MutableMapping[str, int], spare: tuple[dict[str, int], ...] = (),
        idle_needed: MutableMapping[str, int] | None = None, booting_left: MutableMapping[str, int] | None = None,
        together: dict[str, list[int]] | None = None, spares: SpareBoots | None = None) -> list[tuple[str, int]]:
    """Ask for each uncovered gang (``left`` VMs of ``group``) in one pool that can hold all of it: its
    spare VMs (``spare``: idle, running, pending that no job took, as ``match`` left them) plus the room
    left. The pool with the most spare VMs goes first (an idle VM there claims a part as soon as the start
    comes, and the gang then assembles in that region), ties in ``ranked`` order; only the rest is asked
    for, and a spare wanted where the gang needs two or more boots and ``spares`` allows one. A gang no
    pool can hold waits (``held``, with why). Returns (pool, VMs asked for), per gang; each ask is a unit
    of ``together`` too (``Plan.together``: its VMs come whole or not at all; a spare is none)."""
    asked = []
    for need in DemandGroup(group.regions, left, group.oldest, group.priority, gang=group.gang).chunks():
        def supply(region: str) -> int:
            return sum(pool.get(region, 0) for pool in spare)

        fits = [r for r in ranked if supply(r) + room(r) >= need]
        region = max(fits, key=supply) if fits else None  # the most spare (the fewest to boot), then by rank
        if region is None:
            held[f"no allowed pool has room for a gang of {group.gang} VMs (max_vms_per_region, max_vms)"] += need
            continue
        boots = need - min(need, spare[0].get(region, 0)) if spare else need
        for index, pool in enumerate(spare):  # the spare VMs first: idle, then booting
            take = min(need, pool.get(region, 0))
            if take:
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
            asked.append((region, need))
            if together is not None:
                together.setdefault(region, []).append(need)
    return asked


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
