"""Gangs (multi-node jobs, ``SimJob.nodes`` > 1) in the simulated world, as production runs them
(``zen.core.gang``, docs/how-to/multi-node.md):

- the gang's demand goes to the planner as production's fleet gives it (``DemandGroup.gang`` = its nodes,
  ``part`` and ``count``: its VMs not yet claimed, gangs needing as many folded together by
  ``zen.scaling.model.fold_demand``);
- each usable VM of an allowed pool claims one part (it holds it, busy to the planner, not running the
  command); the first claim fixes the gang's region (the other regions' claims are refused) and sets the
  assembly deadline, first claim + ``GangConfig.assemble_s`` (600 s, production's bound); the job starts
  when the N-th node claims, on all N at once;
- past the deadline, or sooner when the planner's memory blocks the region it assembles in (a stockout)
  while another of its regions is settled (neither blocked nor found stocked out within ``assemble_s``),
  or leaves it fewer VMs for the gang than it still needs (``RegionMemory.gang_room``: its limits),
  checked at the periodic tick as production's ``assembly_expired``, the parts are given back (their VMs
  idle again) and the gang is queued afresh as its next attempt, offered first outside that region (in
  its settled regions, if any) for ``assemble_s`` (``zen.core.gang.avoid_region``), then everywhere;
- one fate: a preemption of any node ends the attempt on every node (each node's run since its last
  checkpoint is rework) and the gang is queued again; a node holding a part that goes away leaves the
  gang (its place offered again);
- when a gang ends, every node is freed (idle, or deleted by a single-use policy).

A hedging policy (``hedges_gangs``: ask-every-region) assembles a copy of the gang in every allowed
region at once; the first region to hold N parts runs it, the others' parts are given back and its
surplus boots elsewhere cancelled.

Measured (``RunResult``): each gang's first start, the node-seconds parts waited for their gang's last
node, gangs whose running nodes span regions (split), nodes still holding a gang after its attempt ended
(left), and assembly timeouts. The last two are computed from the world's VMs, not assumed.
"""

from __future__ import annotations

import heapq
from datetime import timedelta

from zen.core.gang_records import GangConfig
from zen.scaling.model import DemandGroup, VmPhase, fold_demand
from zen_dev.sim.instances import _FINISH, kept_s
from zen_dev.sim.routing import blocked

ASSEMBLE_S = float(GangConfig().assemble_s)  # production's default: gangs.assemble_s
_QUEUED, _RUNNING, _DONE = "QUEUED", "RUNNING", "DONE"  # as zen_dev.sim.world


class Gangs:
    """The gangs of one ``Simulation`` (``world``)."""

    def __init__(self, world, hedged: bool, assemble_s: float = ASSEMBLE_S):
        self.w, self.hedged, self.assemble_s = world, hedged, assemble_s
        self.left_seen: set[tuple[str, str, int]] = set()  # (vm, job, attempt) counted as left over

    # -- demand ----------------------------------------------------------------------------------
    def demand(self, cluster) -> tuple[DemandGroup, ...]:
        """The queued gangs' VMs not yet claimed, as production's fleet folds them: those queued past their start
        bound (its own ``max_start_wait_s``, else ``cluster.start_bound_s``) a group apart
        (``zen_dev.sim.ports.SimFleet._demand`` looks again when the next one passes it)."""
        if not cluster.gangs:
            return ()
        dt, parts, late = self.w.dt, [], []
        for job in cluster.gangs.values():
            spec = job.spec
            n, oldest = spec.nodes, dt(job.queued_s)
            every, wait = job.terms
            into = late if self.w.now - job.queued_s >= (cluster.start_bound_s if wait is None else wait) else parts
            if self.hedged and job.parts:  # a copy assembling in every region: each its own demand
                for pool in job.pools:
                    region = cluster.migs[pool].region
                    need = n - sum(1 for vm in job.parts if vm.mig.region == region)
                    into.append(((spec.priority, (pool,), wait, every, n, need, None), need, oldest, None))
            else:
                reach, need = job.gang_reach or job.pools, n - len(job.parts)
                into.append(((spec.priority, reach, wait, every, n, need, None), need, oldest, None))
        return fold_demand(late) + fold_demand(parts)

    def wanted(self, cluster, pool: str) -> int:
        """VMs the queued gangs still want in ``pool`` (for ask-every-region's loser cancelling)."""
        return sum(group.count for group in self.demand(cluster) if pool in group.regions)

    def _changed(self, cluster) -> None:
        cluster.demand_view = None

    # -- queueing and claims ---------------------------------------------------------------------
    def offer(self, job, avoid: str | None = None) -> None:
        """The gang is queued (submitted, or a new attempt): its parts are offered in every allowed pool
        (``avoid``: outside that region, until ``assemble_s`` from now), and the idle VMs there claim them."""
        w = self.w
        cluster, spec = w.clusters[job.spec.cluster], job.spec
        # Its start published now; ``queued_s`` is the world's (a new attempt after its assembly was given
        # back stays QUEUED: production keeps its ``queued_at``).
        job.state, job.reach, job.published_s = _QUEUED, job.pools, w.now
        job.parts, job.gang_reach, job.assemble_until, job.widen_at = [], None, None, None
        others = tuple(p for p in job.pools if cluster.migs[p].region != avoid) if avoid else ()
        if others and len(others) < len(job.pools):  # the settled ones, if any
            settled = tuple(p for p in others if not self._unsettled(cluster, job, cluster.migs[p].region))
            job.gang_reach, job.widen_at = settled or others, w.now + self.assemble_s
        job.qseq = next(w.seq)
        cluster.gangs[spec.job_id] = job
        self._changed(cluster)
        self._spread(cluster, job)

    def _spread(self, cluster, job) -> None:
        entry = (-job.spec.priority, job.published_s, job.qseq, job)
        for pool in job.gang_reach or job.pools:
            heapq.heappush(cluster.heaps[pool], entry)
        for pool in job.gang_reach or job.pools:
            idle = cluster.idle.get(pool)
            while idle and job.state is _QUEUED and self._claimable(cluster, job, pool):
                _, vm = idle.popitem()
                self._claim(vm, job)

    def _claimable(self, cluster, job, pool: str) -> bool:
        region = cluster.migs[pool].region
        if self.hedged:
            return sum(1 for vm in job.parts if vm.mig.region == region) < job.spec.nodes
        return (not job.parts or job.parts[0].mig.region == region) and len(job.parts) < job.spec.nodes

    def take(self, vm, job) -> bool:
        """An idle VM found the gang at the head of its pool's queue: it claims a part, or (the gang
        assembles in another region) the entry is dropped. True: the VM holds a part now."""
        cluster = vm.mig.cluster
        if not self._claimable(cluster, job, vm.mig.key):
            return False
        self._claim(vm, job)
        if job.state is _QUEUED:  # more parts to claim here
            heapq.heappush(cluster.heaps[vm.mig.key], (-job.spec.priority, job.published_s, job.qseq, job))
        return True

    def _claim(self, vm, job) -> None:
        w = self.w
        cluster = vm.mig.cluster
        vm.part, vm.claimed_s = job, w.now
        vm.phase, vm.since = VmPhase.BUSY, w.now  # holds a part: busy to the planner, never drained
        vm.touch()
        vm.epoch += 1
        if not job.parts:
            job.assemble_until, job.widen_at = w.now + self.assemble_s, None
            if not self.hedged:  # the first claim fixes the gang's region (zen.core.gang._claim)
                job.gang_reach = tuple(p for p in job.pools if cluster.migs[p].region == vm.mig.region)
        job.parts.append(vm)
        job.claimed_before = cluster.passes
        self._changed(cluster)
        here = [p for p in job.parts if p.mig.region == vm.mig.region]
        if len(here) == job.spec.nodes:
            self._start(cluster, job, here)

    def _wait_ends(self, vm, given_back: bool = False) -> None:
        """The VM no longer waits holding a part: its wait is idle node-time (``given_back``: it ran no
        gang from it, its part given back or lost)."""
        waited = self.w.now - vm.claimed_s
        self.w.result.gang_idle_seconds += waited
        if given_back:
            self.w.result.gang_idle_given_back_seconds += waited
        vm.part = vm.claimed_s = None

    def _start(self, cluster, job, nodes: list) -> None:
        """The N-th part claimed: the job runs on all N (one region); other regions' parts go back."""
        w, now, result = self.w, self.w.now, self.w.result
        others = [vm for vm in job.parts if vm not in nodes]
        for vm in job.parts:
            self._wait_ends(vm, given_back=vm not in nodes)
        job.parts, job.gang_reach, job.assemble_until = [], None, None
        del cluster.gangs[job.spec.job_id]
        self._changed(cluster)
        job.state = _RUNNING
        if job.first_start_s is None:
            job.first_start_s = now
            result.start_regions.append((now, nodes[0].mig.region))
        if len({vm.mig.region for vm in nodes}) > 1:
            result.gangs_split += 1
        job.nodes_vms = list(nodes)
        for vm in nodes:
            vm.job, vm.job_start_s, vm.phase, vm.since = job, now, VmPhase.BUSY, now
            vm.touch()
            vm.epoch += 1
        if w.cancel_losers:
            self._cancel_losers(cluster, job, nodes[0].mig.region)
        w._push(now + job.attempt_s, _FINISH, self.finish, job, job.attempt)
        for vm in others:
            self._free(vm)

    def _cancel_losers(self, cluster, job, won_in: str) -> None:
        """Ask-every-region: the gang's requests in its other regions lost: up to N surplus instances
        there (beyond what the rest of the queue wants) are cancelled, waiting-for-capacity ones first."""
        for pool in job.pools:
            mig = cluster.migs[pool]
            if mig.region == won_in:
                continue
            booting = [vm for vm in mig.vms.values() if vm.phase is VmPhase.BOOTING]
            wanted = sum(len(jobs) for (_, regions, _), jobs in cluster.groups.items() if pool in regions)
            surplus = min(job.spec.nodes, len(booting) - wanted - self.wanted(cluster, pool))
            booting.sort(key=lambda vm: (vm.created_s is not None, -vm.since, vm.name))
            for vm in booting[:max(0, surplus)]:
                if mig.vms.get(vm.name) is vm:  # not gone with its flex-start request, cancelled whole
                    self.w._delete_at_once(vm)

    # -- endings ---------------------------------------------------------------------------------
    def finish(self, job, attempt: int) -> None:
        """The gang's command ended on every node: each node is freed."""
        if job.attempt != attempt or job.state is not _RUNNING:
            return
        w, now = self.w, self.w.now
        job.state = _DONE  # or FAILED, stopped at its max_runtime_s on every node (as world._finish)
        w.result.stopped_at_max_runtime += job.over_limit
        if w.admission:
            for admitted in w.admission.release(job, now):
                w._offer(admitted)
        nodes, job.nodes_vms = job.nodes_vms, []
        for vm in nodes:
            vm.busy_s += now - vm.job_start_s
            vm.jobs_run += 1
            vm.job = vm.job_start_s = None
        for vm in nodes:
            self._free(vm)
        self.count_left(job)

    def _free(self, vm) -> None:
        """A node the gang no longer holds: idle again (it may take other work), or deleted (single-use)."""
        w = self.w
        vm.phase = VmPhase.IDLE
        if w.single_use:
            w._delete_at_once(vm)
            return
        vm.since = w.now
        vm.touch()
        vm.epoch += 1
        w._on_idle(vm)

    def abort(self, job, preempted) -> list:
        """A node of the running gang was preempted: the attempt ends on every node (one fate). The other
        nodes' runs since the last checkpoint are rework; returns them, to be freed (``free_all``) once
        the gang is queued again (they may claim its new attempt)."""
        w, now, result = self.w, self.w.now, self.w.result
        cluster = preempted.mig.cluster
        gpus, floor = cluster.gpu_count, cluster.floor_usd_per_gpu_s
        job.attempt += 1  # its finish event is stale now
        others = [vm for vm in job.nodes_vms if vm is not preempted]
        job.nodes_vms = []
        for vm in others:
            ran = now - vm.job_start_s
            lost = ran - kept_s(job, ran)
            vm.busy_s += ran  # busy, not waste; the part thrown away counted as lost, and billed as rework
            vm.lost_s += lost
            vm.jobs_run += 1
            result.lost_seconds += lost
            result.rework_gpu_seconds += lost * gpus
            result.useful_gpu_seconds -= lost * gpus
            result.floor_usd -= lost * gpus * floor
            vm.job = vm.job_start_s = None
        return others

    def free_all(self, job, vms: list) -> None:
        for vm in vms:
            self._free(vm)
        self.count_left(job)

    def leave(self, vm) -> None:
        """A VM holding a part went away (preempted) before the gang was complete: it leaves the gang,
        whose place is offered again (``zen.core.gang.decide_given_back``)."""
        job, cluster = vm.part, vm.mig.cluster
        self._wait_ends(vm, given_back=True)
        job.parts.remove(vm)
        job.claimed_before = cluster.passes  # a pass before counted it busy (zen.core.gang.room_seen_after)
        if not job.parts:
            job.gang_reach = job.assemble_until = None
        job.published_s = self.w.now  # the freed place's start published again
        self._changed(cluster)
        self._spread(cluster, job)

    def expire(self, cluster) -> None:
        """The tick: a gang not complete by its assembly deadline, or assembling in a region the planner's
        memory blocks (a stockout), gives its parts back and is queued afresh as its next attempt, first
        outside that region (``zen.core.gang.assembly_expired``); a gang offered outside a region whose
        wait is over is offered everywhere (``zen.core.routing.next_route``)."""
        now = self.w.now
        for job in [job for job in cluster.gangs.values() if job.widen_at is not None and job.widen_at <= now]:
            if job.state is _QUEUED and not job.parts:
                self.offer(job)
        due = [job for job in cluster.gangs.values()
               if job.assemble_until is not None and (job.assemble_until <= now or self._released(cluster, job))]
        for job in due:
            if job.state is not _QUEUED or job.assemble_until is None:
                continue  # completed (or gave its parts back) while an earlier one's parts were released
            parts = list(job.parts)
            for vm in parts:
                self._wait_ends(vm, given_back=True)
            if job.assemble_until <= now:
                self.w.result.gang_assembly_timeouts += 1
            elif self._short(cluster, job):
                self.w.result.gang_room_releases += 1
            else:
                self.w.result.gang_stockout_releases += 1
            job.attempt += 1
            # Queued afresh first (the released VMs may claim its new attempt where it may go), elsewhere first.
            self.offer(job, avoid=None if self.hedged else parts[0].mig.region)
            self.free_all(job, parts)

    def _released(self, cluster, job) -> bool:
        """Given back before its deadline: its region cannot hold the rest of it, or is stocked out."""
        return self._short(cluster, job) or self._stocked_out(cluster, job)

    def _short(self, cluster, job) -> bool:
        """The planner's last pass left the region the gang assembles in fewer VMs for it than it still needs
        (``RegionMemory.gang_room``, the most of its pools), and it may go to another (not hedged copies); a
        pass before the gang's last claim says nothing of it (``zen.core.gang.room_seen_after``; here, where
        passes take no time and see every claim made before them, one that came after it)."""
        if self.hedged or not job.parts:
            return False
        region = job.parts[0].mig.region
        if not any(cluster.migs[p].region != region for p in job.pools):
            return False  # no other region: its released VMs would claim it again at once
        rooms = [getattr(cluster.memory.get(p), "gang_room", None) for p in self._pools(cluster, job, region)]
        if cluster.passes <= job.claimed_before or not rooms or None in rooms:
            return False
        return max(rooms) < job.spec.nodes - len(job.parts)

    def _stocked_out(self, cluster, job) -> bool:
        """The planner's memory blocks the region the gang assembles in, and another of its regions is
        settled (not for hedged copies)."""
        if self.hedged or not job.parts:
            return False
        region = job.parts[0].mig.region
        return self._blocked(cluster, job, region) and any(
            not self._unsettled(cluster, job, other) for other in {cluster.migs[p].region for p in job.pools} - {region})

    def _blocked(self, cluster, job, region: str) -> bool:
        """The planner's memory blocks every pool of ``region`` the job may use."""
        return blocked(cluster, self._pools(cluster, job, region), self.w.clock())

    def _unsettled(self, cluster, job, region: str) -> bool:
        """Blocked, or the planner found a stockout in every pool of ``region`` the job may use within
        ``assemble_s`` and no VM booted there since (``fleet.blocked_regions`` with ``since``)."""
        since = self.w.clock() - timedelta(seconds=self.assemble_s)

        def lately(memory) -> bool:
            found, booted = memory.last_stockout_at, memory.last_boot_at
            return found is not None and found > since and not (booted is not None and booted > found)

        return self._blocked(cluster, job, region) or all(
            (memory := cluster.memory.get(pool)) is not None and lately(memory) for pool in self._pools(cluster, job, region))

    @staticmethod
    def _pools(cluster, job, region: str) -> tuple[str, ...]:
        return tuple(p for p in job.pools if cluster.migs[p].region == region)

    # -- the checks --------------------------------------------------------------------------------
    def count_left(self, job) -> int:
        """Nodes still holding ``job`` (running it, or a part) that its current attempt does not hold:
        left over after an attempt ended. Counted once per VM, job and attempt."""
        cluster = self.w.clusters[job.spec.cluster]
        found = 0
        for vm in cluster.vms.values():
            if (vm.job is job and vm not in job.nodes_vms) or (vm.part is job and vm not in job.parts):
                key = (vm.name, job.spec.job_id, job.attempt)
                if key not in self.left_seen:
                    self.left_seen.add(key)
                    found += 1
        self.w.result.nodes_left_after_gang += found
        return found

    def finish_run(self, jobs) -> None:
        """At the horizon: parts still waiting end their wait; every gang checked for left-over nodes."""
        w = self.w
        for cluster in w.clusters.values():
            for vm in cluster.vms.values():
                if vm.part is not None and vm.claimed_s is not None:  # still waiting: never ran from it
                    w.result.gang_idle_seconds += w.now - vm.claimed_s
                    w.result.gang_idle_given_back_seconds += w.now - vm.claimed_s
        gangs = [job for job in jobs if job.spec.nodes > 1]
        for job in gangs:
            self.count_left(job)
        w.result.gang_starts = [(job.spec.submit_s, job.first_start_s) for job in gangs]
