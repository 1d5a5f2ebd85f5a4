"""Boots that do not deliver, for the planner (``zen.scaling.planner``): which booting VMs are stuck
(:func:`booting`), and the probes among them: instances of a blocked pool still waiting for capacity. A
probe bills nothing and keeps the pool's place for when capacity returns: one per pool that demand wants
is kept (:func:`pruned`); at the cluster's ``max_vms``, they give their places to pools that are not
stocked out (:func:`giving_way`). Pure. Why, and what it was measured to do:
docs/explanations/scaling.md.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Callable, Mapping

from zen.scaling.model import ErrorKind, RegionMemory, Timing, Vm, VmPhase

CAPACITY_ERRORS = (ErrorKind.STOCKOUT, ErrorKind.QUOTA)


def booting(phases: Mapping[tuple[str, VmPhase], tuple[Vm, ...]], memory: Mapping[str, RegionMemory], now: datetime,
            timing: Timing, boot_s: Callable[[str], float], flex: Callable[[str], bool]
            ) -> tuple[defaultdict[str, list[Vm]], defaultdict[str, list[Vm]], dict[str, float]]:
    """(stuck, healthy) booting VMs per pool, and when each that got capacity was first seen with it (epoch
    seconds, from the pool's memory, else now). Stuck: a capacity error; or, with capacity, not usable
    twice the pool's boot after it got it (within ``spill_after_s`` .. ``boot_timeout_s``); or, without, asked
    ``spill_after_s`` ago (a flex-start request: twice the pool's asked-to-usable time, at least that)."""
    stuck, healthy = defaultdict[str, list[Vm]](list), defaultdict[str, list[Vm]](list)
    spill_before, now_s = now - timedelta(seconds=timing.spill_after_s), now.timestamp()
    got: dict[str, float] = {}
    for (pool, phase), vms in phases.items():
        if phase is not VmPhase.BOOTING:
            continue
        seen = dict(zip(memory[pool].started, memory[pool].started_since))
        deadline_s = max(timing.spill_after_s, 2 * boot_s(pool))
        for vm in vms:
            if vm.started:
                got[vm.name] = seen.get(vm.name, now_s)
                late = now_s - got[vm.name] >= min(timing.boot_timeout_s, deadline_s)
            else:
                late = vm.since <= (now - timedelta(seconds=deadline_s) if flex(pool) else spill_before)
            (stuck if vm.creation_error in CAPACITY_ERRORS or late else healthy)[pool].append(vm)
    return stuck, healthy, got


def pruned(stuck: list[Vm], wanted: bool, got_s: Callable[[Vm], float], timing: Timing) -> tuple[list[Vm], list[Vm]]:
    """(kept, deleted) of a pool's stuck instances: the oldest still waiting for capacity is kept as the
    pool's probe while demand wants the pool (else the oldest that got capacity, for at most
    ``boot_timeout_s``); the others are deleted."""
    ordered = sorted(stuck, key=lambda vm: (vm.started, vm.since))
    probe = bool(ordered) and (not ordered[0].started or got_s(ordered[0]) < timing.boot_timeout_s)
    keep = int(wanted and probe)
    return ordered[:keep], ordered[keep:]


def waiting(stuck: list[Vm]) -> list[Vm]:
    """A blocked pool's probes that may give their places: those still waiting for capacity (billed nothing)."""
    return [vm for vm in stuck if not vm.started]


def giving_way(probes: list[Vm], wanted: int, blocked_until: Callable[[Vm], datetime | None]) -> list[Vm]:
    """Of ``probes`` (those left after pruning), the ones whose places ``wanted`` jobs the cluster's
    ``max_vms`` holds take: those of the pools whose blocks end last first."""
    def ends(vm: Vm) -> float:
        until = blocked_until(vm)
        return until.timestamp() if until is not None else 0.0

    ordered = sorted(probes, key=lambda vm: (ends(vm), vm.name), reverse=True)
    return ordered[:max(0, wanted)]
