"""Zen's scaling planner: ``ZenPlanner().plan(snapshot) -> Plan``. Pure: no I/O, time from the snapshot.

How it decides, per cluster, each tick:
1. **Learn** from what happened since the last plan. A VM that was booting and is now usable is a
   boot: the region delivers again (block lifted, strikes reset). A new stockout/quota error, or a
   VM booting past ``spill_after_s``, is a strike: the region is blocked for ``block_s`` doubling
   per strike up to ``max_block_s`` (Karpenter remembers unavailable offerings; we also back off).
2. **Match** queued jobs (highest priority, then oldest) to supply they can use: first idle VMs
   (warm reuse: an idle agent takes the job at once), then VMs still booting normally in an allowed,
   unblocked region. A VM stuck in a stocked-out region is not supply: its job *spills over*.
3. **Ask** for one VM per unmatched job in the first allowed region (preference order) that is not
   blocked and has room under the per-MIG and per-cluster limits; none -> HOLD, with the reason.
4. **Probe for free.** An instance stuck CREATING costs nothing and the MIG keeps retrying it, so
   one is kept per blocked region while demand still wants that region: the moment capacity returns
   it boots, which lifts the block. Other stuck instances are deleted (they would boot later into
   idleness). While a region's probe is pending its block is extended rather than re-tested with
   real demand.
5. **Shrink** only idle VMs not needed by queued demand, keeping ``min_vms`` (in the most preferred
   regions). A *warm pool* as large as the jobs expected while a new VM boots (arrival rate over the
   last hour x ``boot_estimate_s``) is kept for ``idle_timeout_s``: reusing a warm VM saves a boot's
   cost and wait. Idle VMs beyond the pool go after ``idle_grace_s``: at the arrival rate seen,
   keeping them would cost more than the boot they might save. Busy VMs are never deleted; booting
   ones only when stuck.
6. **Follow up.** When a tick asked for VMs, it plans again ``follow_up_s`` later, so a stockout on
   the new instances moves demand on within seconds instead of at the next tick. (A pass right
   after a submission does not wait; the next submission or tick sees its errors.)
Every decision carries a reason.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta

from zen.scaling.model import (
    Action, ClusterSnapshot, Decision, ErrorKind, Plan, QueuedJob, RegionMemory, Vm, VmPhase,
)

_CAPACITY_ERRORS = (ErrorKind.STOCKOUT, ErrorKind.QUOTA)


class ZenPlanner:
    name = "zen"

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        return _Planning(snapshot).run()


class _Planning:
    """One planning pass; holds the working state so each step stays small."""

    def __init__(self, snapshot: ClusterSnapshot):
        self.s = snapshot
        self.now = snapshot.now
        self.timing = snapshot.timing
        self.regions = snapshot.cluster.regions
        self.memory = {r: snapshot.memory.get(r, RegionMemory()) for r in self.regions}
        self.plan = Plan()
        self.by_region: dict[str, list[Vm]] = defaultdict(list)
        for vm in snapshot.vms:
            self.by_region[vm.region].append(vm)

    # -- helpers -------------------------------------------------------------------------------
    def _age(self, vm: Vm) -> float:
        return (self.now - vm.since).total_seconds()

    def _stuck(self, vm: Vm) -> bool:
        return vm.phase is VmPhase.BOOTING and (
            vm.creation_error in _CAPACITY_ERRORS or self._age(vm) >= self.timing.spill_after_s
        )

    def _blocked(self, region: str) -> bool:
        until = self.memory[region].blocked_until
        return until is not None and until > self.now

    def _decide(self, action: Action, region: str | None, reason: str, count: int = 0, vm: str | None = None):
        self.plan.decisions.append(Decision(action, region, reason, count, vm))

    def _strike(self, region: str, why: str) -> None:
        memory = self.memory[region]
        if self._blocked(region):
            return  # already blocked for this episode; the probe will tell us when it ends
        strikes = memory.strikes + 1
        block = min(self.timing.block_s * 2 ** (strikes - 1), self.timing.max_block_s)
        self.memory[region] = replace(memory, strikes=strikes, last_stockout_at=self.now,
                                      blocked_until=self.now + timedelta(seconds=block))
        self._decide(Action.BLOCK, region, f"{why}; blocked for {block:g}s (strike {strikes})")

    # -- steps ---------------------------------------------------------------------------------
    def learn(self) -> None:
        new_errors: dict[str, list] = defaultdict(list)
        for error in self.s.errors:
            seen = self.memory.get(error.region, RegionMemory()).seen_errors_until
            if error.region in self.memory and (seen is None or error.at > seen):
                new_errors[error.region].append(error)
        for region in self.regions:
            memory = self.memory[region]
            vms = {vm.name: vm for vm in self.by_region[region]}
            # Booted since the last plan: was booting then, or is new and already usable.
            booted = [n for n, vm in vms.items() if vm.phase in (VmPhase.IDLE, VmPhase.BUSY)
                      and (n in memory.booting or n not in memory.known)]
            errors = new_errors.get(region, [])
            if errors:
                memory = replace(memory, seen_errors_until=max(e.at for e in errors))
            if booted:
                if memory.strikes or memory.blocked_until:
                    self._decide(Action.UNBLOCK, region, f"{booted[0]} booted: the region delivers again")
                memory = replace(memory, strikes=0, blocked_until=None, last_boot_at=self.now)
            self.memory[region] = memory
            capacity_errors = [e for e in errors if e.kind in _CAPACITY_ERRORS]
            stuck = [vm for vm in self.by_region[region] if self._stuck(vm)]
            if capacity_errors and not booted:
                self._strike(region, f"{len(capacity_errors)} {capacity_errors[-1].kind.value.lower()} error(s)")
            elif stuck and not booted:
                self._strike(region, f"{stuck[0].name} has not booted after {self._age(stuck[0]):.0f}s")

    def match(self) -> list[QueuedJob]:
        """Cover queued jobs with idle, then healthy booting VMs; return the jobs left uncovered."""
        idle = {r: sum(vm.phase is VmPhase.IDLE for vm in self.by_region[r]) for r in self.regions}
        booting = {
            r: sum(vm.phase is VmPhase.BOOTING and not self._stuck(vm) for vm in self.by_region[r])
            if not self._blocked(r) else 0
            for r in self.regions
        }
        self.idle_needed = defaultdict(int)
        uncovered = []
        for job in sorted(self.s.queued, key=lambda j: (-j.priority, j.queued_at, j.job_id)):
            region = next((r for r in job.regions if idle.get(r, 0) > 0), None)
            if region:
                idle[region] -= 1
                self.idle_needed[region] += 1
                continue
            region = next((r for r in job.regions if booting.get(r, 0) > 0), None)
            if region:
                booting[region] -= 1
                continue
            uncovered.append(job)
        return uncovered

    def ask(self, uncovered: list[QueuedJob]) -> None:
        # Instances count against limits until they are gone, whatever their phase.
        counts = {r: max(len(self.by_region[r]), self.s.target_sizes.get(r, 0)) for r in self.regions}
        total = sum(counts.values())
        limits = self.s.cluster
        held: dict[str, int] = defaultdict(int)
        for job in uncovered:
            choice = None
            for region in job.regions:
                if region not in counts or self._blocked(region):
                    continue
                if counts[region] + self.plan.add.get(region, 0) >= limits.max_vms_per_region:
                    continue
                choice = region
                break
            if choice is None:
                why = self._hold_reason(job, counts)
                held[why] += 1
                continue
            if total + sum(self.plan.add.values()) >= limits.max_vms:
                held[f"cluster limit of {limits.max_vms} VMs reached"] += 1
                continue
            self.plan.add[choice] = self.plan.add.get(choice, 0) + 1
        for region, count in self.plan.add.items():
            self._decide(Action.ADD, region, f"{count} queued job(s) without a VM", count)
        for why, count in held.items():
            self._decide(Action.HOLD, None, f"{count} job(s) wait: {why}", count)
        self._keep_min(counts, total)

    def _hold_reason(self, job: QueuedJob, counts: dict[str, int]) -> str:
        blocked = [r for r in job.regions if r in counts and self._blocked(r)]
        if blocked and len(blocked) == len([r for r in job.regions if r in counts]):
            return f"every allowed region is stocked out ({', '.join(blocked)}); probes are waiting for capacity"
        return "allowed regions are at their per-region limit"

    def _keep_min(self, counts: dict[str, int], total: int) -> None:
        missing = self.s.cluster.min_vms - (total + sum(self.plan.add.values()))
        for region in self.regions:
            if missing <= 0:
                break
            if self._blocked(region):
                continue
            room = self.s.cluster.max_vms_per_region - counts[region] - self.plan.add.get(region, 0)
            take = min(room, missing)
            if take > 0:
                self.plan.add[region] = self.plan.add.get(region, 0) + take
                missing -= take
                self._decide(Action.ADD, region, f"keep min_vms={self.s.cluster.min_vms}", take)

    def prune_stuck(self) -> None:
        wanted = {r for job in self.s.queued for r in job.regions}
        for region in self.regions:
            stuck = sorted((vm for vm in self.by_region[region] if self._stuck(vm)), key=lambda vm: vm.since)
            keep = 1 if region in wanted else 0  # the free probe
            for vm in stuck[keep:]:
                self.plan.delete.append((region, vm.name))
                self._decide(Action.DELETE, region, f"stuck booting for {self._age(vm):.0f}s; not needed as a probe",
                             vm=vm.name)
            if stuck[:keep] and self._blocked(region):
                memory = self.memory[region]
                extended = max(memory.blocked_until, self.now + timedelta(seconds=self.timing.block_s))
                self.memory[region] = replace(memory, blocked_until=extended)

    def shrink_idle(self) -> None:
        min_vms = self.s.cluster.min_vms
        alive = sum(1 for vm in self.s.vms if vm.phase is not VmPhase.DELETING) - len(self.plan.delete)
        warm_pool = round(self.s.arrivals_last_hour / 3600 * self.timing.boot_estimate_s)
        # Keep the most preferred regions' and the most recently idle VMs; consider the others first.
        order = {r: i for i, r in enumerate(self.regions)}
        idle = sorted((vm for vm in self.s.vms if vm.phase is VmPhase.IDLE),
                      key=lambda vm: (-order.get(vm.region, 0), vm.since))
        spare = {r: sum(vm.phase is VmPhase.IDLE for vm in self.by_region[r]) - self.idle_needed.get(r, 0)
                 for r in self.regions}
        unneeded = sum(max(0, n) for n in spare.values())
        for vm in idle:
            if alive <= min_vms:
                break
            if spare.get(vm.region, 0) <= 0:
                continue
            in_pool = unneeded <= warm_pool
            limit = self.timing.idle_timeout_s if in_pool else self.timing.idle_grace_s
            if self._age(vm) < limit:
                continue
            spare[vm.region] -= 1
            unneeded -= 1
            alive -= 1
            self.plan.delete.append((vm.region, vm.name))
            why = "warm pool timeout" if in_pool else f"beyond the warm pool of {warm_pool}"
            self._decide(Action.DELETE, vm.region, f"idle for {self._age(vm):.0f}s and not needed ({why})",
                         vm=vm.name)

    def run(self) -> Plan:
        self.learn()
        uncovered = self.match()
        self.ask(uncovered)
        self.prune_stuck()
        self.shrink_idle()
        self.plan.memory = {
            r: replace(m, booting=tuple(vm.name for vm in self.by_region[r] if vm.phase is VmPhase.BOOTING),
                       known=tuple(vm.name for vm in self.by_region[r]))
            for r, m in self.memory.items()
        }
        return self.plan
