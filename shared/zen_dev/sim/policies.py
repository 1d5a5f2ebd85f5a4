"""The policies the simulator compares; each is a ``zen.scaling.model.Policy`` (``plan(snapshot)``).

``zen`` (Zen's planner, when importable) and the baselines: ``ask-every-region`` (the original
system, modelled charitably, on the cluster's first provisioning model), ``ask-every-region-standard``
(the same on standard VMs: the original system as it ran), ``cheapest-first`` (pools in price order,
moving on after a stockout, as SkyPilot's optimizer does), ``failover``, ``single-region``, and
``unlimited`` (a reference, not a bound). Every baseline but ``cheapest-first`` keeps to one model
(``models``); zen and ``cheapest-first`` may use every model the cluster lists. The baselines keep within
the limits themselves, so their violation counts are 0.
What each does and why: docs/reference/simulator.md#the-policies
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from datetime import timedelta

from zen.scaling.model import (
    Action, ClusterSnapshot, Decision, DemandGroup, ErrorKind, Plan, Policy, RegionMemory, VmIndex, VmPhase, vm_index,
)

BASELINES = ("ask-every-region", "ask-every-region-standard", "cheapest-first", "failover", "single-region",
             "unlimited")
POLICY_NAMES = ("zen",) + BASELINES
_CAPACITY_ERRORS = (ErrorKind.STOCKOUT, ErrorKind.QUOTA)
_NO_MEMORY = RegionMemory()  # a region not yet remembered (frozen: one shared value)


class PolicyUnavailable(LookupError):
    """The policy exists but cannot be built here (e.g. ZenPlanner not importable yet)."""


def make_policy(name: str) -> Policy:
    if name == "zen":
        try:
            from zen.scaling.planner import ZenPlanner
        except ImportError as exc:
            raise PolicyUnavailable(f"policy zen is unavailable: {exc}") from None
        return ZenPlanner()
    factories = {"ask-every-region": AskEveryRegion, "ask-every-region-standard": AskEveryRegionStandard,
                 "cheapest-first": CheapestFirst, "failover": Failover, "single-region": SingleRegion,
                 "unlimited": Unlimited}
    if name not in factories:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
    return factories[name]()


def available_policies() -> list[str]:
    names = []
    for name in POLICY_NAMES:
        try:
            make_policy(name)
        except PolicyUnavailable:
            continue
        names.append(name)
    return names


def _ordered_demand(snapshot: ClusterSnapshot) -> list[DemandGroup]:
    """Demand groups by priority, then age (a pass is O(groups), not O(queued jobs))."""
    return sorted(snapshot.demand_groups(), key=lambda g: (-g.priority, g.oldest, g.regions))


def primary_model(models: tuple[str, ...]) -> tuple[str, ...]:
    """The cluster's first provisioning model only: a baseline that knows one kind of VM."""
    return models[:1]


class AskEveryRegion:
    name = "ask-every-region"
    single_use = True
    cancel_losers_on_start = True
    hedges_gangs = True  # a gang: every region asked for all N at once; the first to hold N runs it
    models = staticmethod(primary_model)

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        limits, index = snapshot.cluster, vm_index(snapshot.vms)
        plan = Plan(memory=dict(snapshot.memory))
        pending: dict[str, int] = defaultdict(int)
        for group in snapshot.demand_groups():
            for region in group.regions:
                pending[region] += group.count
                _gang_units(plan, region, group)
        total = len(snapshot.vms)
        for region in limits.regions:
            vms = index.region(region)
            idle = index.phase(region, VmPhase.IDLE)
            for vm in idle:  # an idle VM at tick time found no job: delete it at once
                plan.delete.append((region, vm.name))
            booting = index.phase(region, VmPhase.BOOTING)
            busy = len(index.phase(region, VmPhase.BUSY))
            want = max(0, min(pending[region], limits.max_vms_per_region - busy))
            if want > len(booting):
                room = min(limits.max_vms_per_region - (len(vms) - len(idle)), limits.max_vms - (total - len(idle)))
                add = max(0, min(want - len(booting), room))
                if add:
                    plan.add[region] = add
                    total += add
            elif len(booting) > want:  # the surplus: failed ones first, then the newest
                booting = sorted(booting, key=lambda vm: (vm.creation_error is None, -vm.since.timestamp()))
                for vm in booting[: len(booting) - want]:
                    plan.delete.append((region, vm.name))
            total -= len(idle)
        return plan


class AskEveryRegionStandard(AskEveryRegion):
    """The original system as it ran: every region asked at once, on standard (on-demand) VMs."""

    name = "ask-every-region-standard"

    @staticmethod
    def models(models: tuple[str, ...]) -> tuple[str, ...]:
        return ("standard",)


class _DemandSized:
    """One VM per queued job not covered by idle or booting VMs, in the region ``candidates``
    picks; a gang's VMs all in the first of them that has them or room for the rest (as SkyPilot provisions a
    multi-node cluster in one place or fails over), never split across pools; idle VMs go after
    ``idle_timeout_s`` (keeping ``min_vms``)."""

    name = "demand-sized"
    models = staticmethod(primary_model)

    def candidates(self, regions: tuple[str, ...], snapshot: ClusterSnapshot,
                   memory: dict[str, RegionMemory]) -> tuple[str, ...]:
        """Where a job allowed in ``regions`` may get a VM, most preferred first."""
        return regions

    def learn(self, snapshot: ClusterSnapshot, index: VmIndex, plan: Plan) -> dict[str, RegionMemory]:
        return dict(snapshot.memory)

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        limits, index = snapshot.cluster, vm_index(snapshot.vms)
        plan = Plan()
        memory = self.learn(snapshot, index, plan)
        deleted = {name for _, name in plan.delete}
        idle, supply, live = {}, {}, {}
        for r in limits.regions:
            booting = index.phase(r, VmPhase.BOOTING)
            idle[r] = len(index.phase(r, VmPhase.IDLE))
            # What learn deletes is no supply, but counts against the limits until gone: the manager
            # applies a plan's adds before its deletions.
            supply[r], live[r] = idle[r] + len(booting), len(index.region(r))
            if deleted:
                supply[r] -= sum(1 for vm in booting if vm.name in deleted)
        total = sum(live.values())
        used_idle: dict[str, int] = defaultdict(int)
        for group in _ordered_demand(snapshot):
            regions = tuple(r for r in self.candidates(group.regions, snapshot, memory) if r in supply)
            if group.gang > 1:  # each gang whole in the first pool that holds it (covered, then added), or none
                for chunk in group.chunks():
                    for region in regions:
                        room = max(0, min(limits.max_vms_per_region - live[region], limits.max_vms - total))
                        if supply[region] + room < chunk:
                            continue
                        covered = min(chunk, supply[region])
                        supply[region] -= covered
                        used_idle[region] += max(0, min(covered, idle[region] - used_idle[region]))
                        if add := chunk - covered:
                            plan.add[region] = plan.add.get(region, 0) + add
                            plan.together.setdefault(region, []).append(add)
                            live[region] += add
                            total += add
                        break
                continue
            left = group.count
            for region in regions:  # covered by idle, then booting VMs
                take = min(left, supply[region])
                if take:
                    supply[region] -= take
                    used_idle[region] += max(0, min(take, idle[region] - used_idle[region]))
                    left -= take
            for region in regions:  # one VM per job left, in the first region with room
                take = min(left, limits.max_vms_per_region - live[region], limits.max_vms - total)
                if take > 0:
                    plan.add[region] = plan.add.get(region, 0) + take
                    live[region] += take
                    total += take
                    left -= take
        self._shrink_idle(snapshot, index, plan, used_idle, total)
        plan.memory = memory
        return plan

    def _shrink_idle(self, snapshot, index: VmIndex, plan: Plan, used_idle, total: int) -> None:
        timeout = timedelta(seconds=snapshot.timing.idle_timeout_s)
        for region in reversed(snapshot.cluster.regions):
            if not index.phase(region, VmPhase.IDLE):
                continue
            spare = sorted(index.phase(region, VmPhase.IDLE), key=lambda vm: vm.since)[used_idle[region]:]
            for vm in spare:
                if total <= snapshot.cluster.min_vms or snapshot.now - vm.since < timeout:
                    continue
                plan.delete.append((region, vm.name))
                total -= 1


class Failover(_DemandSized):
    name = "failover"

    def candidates(self, regions, snapshot, memory):
        return tuple(r for r in regions if not _blocked(memory.get(r), snapshot))

    def learn(self, snapshot: ClusterSnapshot, index: VmIndex, plan: Plan) -> dict[str, RegionMemory]:
        memory = dict(snapshot.memory)
        timing, now = snapshot.timing, snapshot.now
        stuck_before = now - timedelta(seconds=timing.boot_timeout_s)
        errors: dict[str, list] = defaultdict(list)
        for e in snapshot.errors:
            if e.kind in _CAPACITY_ERRORS:
                errors[e.region].append(e)
        for region in snapshot.cluster.regions:
            mem = memory.get(region, _NO_MEMORY)
            seen = mem.seen_errors_until
            fresh = [e for e in errors.get(region, ()) if seen is None or e.at > seen]
            booting = index.phase(region, VmPhase.BOOTING)
            stuck = {id(vm) for vm in booting if vm.since <= stuck_before} if booting else ()
            if fresh:
                mem = mem.replaced(seen_errors_until=max(e.at for e in fresh))
            if (fresh or stuck) and not _blocked(mem, snapshot):
                mem = mem.replaced(blocked_until=now + timedelta(seconds=timing.block_s), last_stockout_at=now)
                plan.decisions.append(Decision(Action.BLOCK, region, "stockout or boot deadline: next region"))
            if booting and _blocked(mem, snapshot):
                for vm in booting:
                    if vm.creation_error is not None or id(vm) in stuck:
                        plan.delete.append((region, vm.name))
            memory[region] = mem
        return memory


class CheapestFirst(Failover):
    """Pools (regions x the cluster's models) in price order, the cheapest unblocked first; a stockout
    or a boot past its deadline blocks a pool and its demand moves to the next (SkyPilot's optimizer
    with failover). Unpriced pools keep the cluster's order after the priced ones."""

    name = "cheapest-first"
    models = None  # every model the cluster lists

    def candidates(self, regions, snapshot, memory):
        limits = snapshot.cluster
        order = {r: i for i, r in enumerate(regions)}

        def price(pool: str) -> float:
            usd = limits.pool(pool).usd_per_hour
            return math.inf if usd is None else usd
        return tuple(sorted(super().candidates(regions, snapshot, memory), key=lambda r: (price(r), order[r])))


class SingleRegion(_DemandSized):
    name = "single-region"

    def candidates(self, regions, snapshot, memory):
        return regions[:1]


class Unlimited(_DemandSized):
    name = "unlimited"

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        unbounded = replace(snapshot.cluster, max_vms_per_region=10**9, max_vms=10**9)
        return super().plan(replace(snapshot, cluster=unbounded))
    ignores_capacity = True


def _gang_units(plan: Plan, pool: str, group: DemandGroup) -> None:
    """A gang group's gangs as units a flex-start MIG asks for whole (``Plan.together``: the port takes those that
    fit what the pool adds, ``zen.scaling.port.whole_units``), as production's planner passes them; without
    them each of a gang's VMs was a request of its own, granted apart."""
    if group.gang > 1:
        plan.together.setdefault(pool, []).extend(group.chunks())


def _blocked(memory: RegionMemory | None, snapshot: ClusterSnapshot) -> bool:
    return memory is not None and memory.blocked_until is not None and memory.blocked_until > snapshot.now
