"""Which VMs a planning pass (``zen.scaling.planner``) gives back: VMs whose agent went silent (``silent``), booting
VMs whose race is over (``losers``) and idle VMs past what they are worth keeping (``unneeded_idle``, ski rental).
Pure: each returns the VMs to delete, with the reason, and the planner records them."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Mapping, Sequence

from zen.scaling import flexrun
from zen.scaling.model import ClusterLimits, DemandGroup, Timing, Vm, VmIndex, VmPhase, ski_rental_keep_s
from zen.scaling.ranking import Ranking

Release = tuple[str, Vm, str]  # (its pool, the VM, why it goes)


def silent(phases: Mapping[tuple[str, VmPhase], tuple[Vm, ...]], now: datetime,
           timing: Timing) -> dict[tuple[str, VmPhase], list[Vm]]:
    """Idle VMs, or busy by their agent's word only (no job in the database: e.g. requeued by the lost-job sweep),
    unheard for ``agent_silence_s`` (agent crashed, VM hung), by (pool, phase)."""
    if math.isinf(timing.agent_silence_s):
        return {}  # off (the simulator's agents never go silent)
    before = now - timedelta(seconds=timing.agent_silence_s)
    found = {}
    for (region, phase), vms in phases.items():
        dead = [vm for vm in vms if (phase is VmPhase.IDLE or phase is VmPhase.BUSY) and vm.job_id is None
                and vm.heard_at is not None and vm.heard_at < before]
        if dead:
            found[region, phase] = dead
    return found


def unheard(vm: Vm, now: datetime) -> str:
    return f"its agent ({vm.phase.value.lower()}, no job) was not heard for {vm.silent_s(now):.0f}s"


def losers(groups: Sequence[DemandGroup], regions: Sequence[str], ranking: Ranking, index: VmIndex,
           healthy: Mapping[str, list[Vm]], booting_left: Mapping[str, int], got: Mapping[str, float],
           asked: Mapping[str, float], places_wanted: int, above_min: int) -> tuple[list[Release], int]:
    """Booting VMs no queued job needs, once a VM the same demand could use (in a region a queued group allows
    with theirs; any, if none allows theirs) became usable after they were asked, or is listed RUNNING now (usable
    within its guest boot: the race is over as soon as Compute says so); or, not RUNNING, at once while jobs
    ``max_vms`` holds want places (``places_wanted``); a flex-start request no queued job needs, at once while not
    granted (granted, its VMs would boot for nobody). Pool by pool, the dearest first, then the cluster's last; in
    each, those not yet RUNNING first (never billed), then the youngest; none below ``min_vms`` (``above_min``: the
    VMs above it), but to give a place ``max_vms`` holds. Returns them and the places still wanted."""
    released: list[Release] = []
    if max(booting_left.values(), default=0) <= 0:
        return released, places_wanted  # every booting VM is needed (or none boots)
    near = defaultdict[str, set[str]](set)
    for group, region in ((g, r) for g in groups for r in g.regions):
        near[region].update(group.regions)
    # Each VM listed RUNNING wins one race: it may end one boot asked before it got capacity.
    wins = {r: [got[vm.name] for vm in healthy[r] if vm.running] for r in regions}
    dearest_first = sorted(regions, key=lambda r: (-ranking.price(r), -ranking.order[r]))  # unpriced: inf
    for region in dearest_first:
        if (extra := booting_left.get(region, 0)) <= 0:
            continue
        if region in near:
            latest_win = max((vm.since for r in near[region] for vm in index.usable(r)), default=None)
        else:
            latest_win = index.latest_win
        # A group may name pools the cluster dropped.
        running = sorted((won, r) for r in (near[region] if region in near else regions) for won in wins.get(r, ()))
        by_age = sorted(healthy[region], key=lambda vm: (vm.running, -vm.since.timestamp()))
        unwanted = ranking.flex(region)  # a request no queued job needs, its pool wanted or not: cancelled
        for vm in by_age:
            if extra <= 0:
                break
            gives_place = places_wanted > 0 and not vm.running  # unbilled yet: to a job max_vms holds
            asked_at = asked.get(vm.name, vm.since.timestamp())  # (a granted flex-start VM's: its request's)
            racing = not gives_place and not (unwanted and not vm.started)
            if racing and (latest_win is None or asked_at > latest_win.timestamp()):
                beat = next(((won, r) for won, r in running if asked_at <= won and not vm.running), None)
                if beat is None:
                    continue  # its race is still open
                running.remove(beat)
                wins[beat[1]].remove(beat[0])
            if not gives_place and above_min - len(released) <= 0:
                # The rest keep min_vms, as idle ones are kept (else asked for again next pass).
                return released, places_wanted
            extra, places_wanted = extra - 1, places_wanted - gives_place
            released.append((region, vm, _why_lost(gives_place, unwanted and not vm.started, region in near)))
    return released, places_wanted


def _why_lost(gives_place: bool, unwanted_request: bool, near: bool) -> str:
    if gives_place:
        return "no queued job needs it, and a job waits for a place under the cluster's max_vms"
    if unwanted_request:
        return ("no queued job needs this flex-start request (its pool wanted by fewer jobs, or none): "
                "cancelled before a grant")
    if near:
        return ("no queued job needs it: a VM usable since it was asked serves them (a race it lost, or "
                "a job that went meanwhile)")
    return "no queued job waits for it any more (served by another VM, stopped or cancelled)"


def keep_s(vm: Vm, ranking: Ranking, timing: Timing) -> float:
    """How long an idle VM is worth keeping: its pool's cold start, times ``keep_factor`` (ski rental)."""
    return ski_rental_keep_s(vm.name, timing.keep_factor * ranking.cold_start_s(vm.region), timing.idle_timeout_s)


def unneeded_idle(idle: Mapping[str, tuple[Vm, ...]], regions: Sequence[str], ranked: Sequence[str],
                  idle_needed: Mapping[str, int], took: Mapping[tuple[str, str], int], cluster: ClusterLimits,
                  ranking: Ranking, timing: Timing, now: datetime, arrivals_last_hour: float,
                  alive: int) -> list[Release]:
    """Idle VMs no job of this pass took, idle longer than they are worth keeping: ``keep_s`` while no more of
    them are spare than the arrivals of that time would take, else ``idle_grace_s``. Another model's first, then
    the worst-ranked (``ranked``: best first) and longest idle; none below ``min_vms`` (``alive``: VMs with
    capacity not deleted), nor one kept for the one-model groups that took its pool's (``flexrun.kept_for``)."""
    released: list[Release] = []
    rate = arrivals_last_hour / 3600
    rank = {r: i for i, r in enumerate(ranked)}  # keep the best-ranked and most recently idle
    in_order = sorted((vm for r in regions for vm in idle[r]), key=lambda vm: (  # another model's first
        not flexrun.foreign(vm, cluster), -rank.get(vm.region, len(rank)), vm.since))
    spare = {r: len(idle[r]) - idle_needed.get(r, 0) for r in regions}
    unneeded, kept = sum(max(0, n) for n in spare.values()), flexrun.kept_for(in_order, took)
    for vm in in_order:
        if alive <= cluster.min_vms:
            break
        if spare.get(vm.region, 0) <= 0 or vm.name in kept:  # (a one-model group's own, counted in spare)
            continue
        keep = keep_s(vm, ranking, timing)
        pool = max(1, math.ceil(rate * keep))
        in_pool = unneeded <= pool
        limit = keep if in_pool else timing.idle_grace_s
        age = (now - vm.since).total_seconds()
        if age < limit:
            continue
        spare[vm.region], unneeded, alive = spare[vm.region] - 1, unneeded - 1, alive - 1
        why = f"kept {keep:.0f}s, the price of a cold start" if in_pool else f"beyond the {pool} worth keeping"
        released.append((vm.region, vm, f"idle for {age:.0f}s and not needed ({why})"))
    return released
