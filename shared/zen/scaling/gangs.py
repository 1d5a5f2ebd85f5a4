"""Gangs as demand (``DemandGroup.gang`` > 1: multi-node jobs, ``zen.core.gang``): each gang's VMs come
from one pool, never spread across regions, and a pool that can give only part of a gang is out for it.
The planner (``zen.scaling.planner``) calls these for gang groups; ordinary groups never come here, so
their plans are what they were. Pure."""

from __future__ import annotations

from typing import Callable, MutableMapping

from zen.scaling.model import DemandGroup


def match(group: DemandGroup, ranked: list[str], pools: tuple[dict[str, int], ...],
          idle_needed: MutableMapping[str, int]) -> int:
    """Cover each gang of ``group`` with the idle, then running, then pending VMs of the first pool
    (in ``ranked`` order) that has enough for the whole gang; returns the VMs left uncovered (whole gangs,
    asked for by ``ask``). ``pools``: (idle, running, pending) per pool, taken from in place."""
    left = 0
    for need in group.chunks():
        region = next((r for r in ranked if sum(pool.get(r, 0) for pool in pools) >= need), None)
        if region is None:
            left += need
            continue
        for index, pool in enumerate(pools):
            take = min(need, pool.get(region, 0))
            if take:
                pool[region] -= take
                need -= take
                if index == 0:
                    idle_needed[region] += take
    return left


def ask(group: DemandGroup, left: int, ranked: list[str], room: Callable[[str], int],
        add: dict[str, int], held: MutableMapping[str, int], spare: tuple[dict[str, int], ...] = (),
        idle_needed: MutableMapping[str, int] | None = None, booting_left: MutableMapping[str, int] | None = None,
        together: dict[str, list[int]] | None = None) -> list[tuple[str, int]]:
    """Ask for each uncovered gang (``left`` VMs of ``group``) in one pool that can hold all of it: its
    spare VMs (``spare``: idle, running, pending that no job took, as ``match`` left them) plus the room
    left. The pool with the most spare VMs goes first (an idle VM there claims a part as soon as the start
    comes, and the gang then assembles in that region), ties in ``ranked`` order; only the rest is asked
    for. A gang no pool can hold waits (``held``, with why). Returns (pool, VMs asked for), per gang; each
    ask is a unit of ``together`` too (``Plan.together``: its VMs come whole or not at all)."""
    asked = []
    for need in DemandGroup(group.regions, left, group.oldest, group.priority, gang=group.gang).chunks():
        def supply(region: str) -> int:
            return sum(pool.get(region, 0) for pool in spare)

        fits = [r for r in ranked if supply(r) + room(r) >= need]
        region = max(fits, key=supply) if fits else None  # the most spare (the fewest to boot), then by rank
        if region is None:
            held[f"no allowed pool has room for a gang of {group.gang} VMs (max_vms_per_region, max_vms)"] += need
            continue
        for index, pool in enumerate(spare):  # the spare VMs first: idle, then booting
            take = min(need, pool.get(region, 0))
            if take:
                pool[region] -= take
                need -= take
                if index == 0 and idle_needed is not None:
                    idle_needed[region] += take
                elif index > 0 and booting_left is not None:
                    booting_left[region] -= take
        if need:
            add[region] = add.get(region, 0) + need
            asked.append((region, need))
            if together is not None:
                together.setdefault(region, []).append(need)
    return asked


def hedge(others: list[str], need: int, room: Callable[[str], int], add: dict[str, int],
          hedges: MutableMapping[str, int], together: dict[str, list[int]] | None = None) -> None:
    """A hedge for a gang whose first pool is uncertain: the whole gang again, in the first of ``others``
    with room for all of it (none: no hedge); a unit of ``together`` as its first ask is."""
    region = next((r for r in others if room(r) >= need), None)
    if region is not None:
        add[region] = add.get(region, 0) + need
        hedges[region] += need
        if together is not None:
            together.setdefault(region, []).append(need)
