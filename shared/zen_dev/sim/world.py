"""The discrete-event world: simulated regional MIGs, zone capacity, VMs, agents and jobs.

One :class:`Simulation` runs one policy over one scenario and job trace on a simulated clock (a heap
of events; nothing sleeps), applying its plans through the production ``ClusterManager`` over the
ports of ``zen_dev.sim.ports``, with the same passes, capacity, boots, billing and preemptions for
every policy.
What it models, and why: docs/reference/simulator.md#what-the-simulator-models
"""

from __future__ import annotations

import gc
import heapq
import itertools
import math
import random
import time
from dataclasses import replace
from datetime import timedelta

from zen.scaling.manager import ClusterManager
from zen.scaling.coverage import racing
from zen.scaling.model import Policy, VmPhase
from zen_dev.capacity.traces import CapacitySchedule
from zen_dev.sim.instances import _BOOTED, _FINISH, _PREEMPT, _SUBMIT, _TICK, InstanceWorld, kept_s
from zen_dev.sim.flexstart import FlexGrants
from zen_dev.sim.gangs import Gangs
from zen_dev.sim.jobs import SimJob
from zen_dev.sim.metrics import RunResult
from zen_dev.sim.ports import SimFleet, SimMigPort
from zen_dev.sim.queues import SimQueues
from zen_dev.sim.routing import blocked, stage, warm_vm
from zen_dev.sim.scenario import Scenario
from zen_dev.sim.setup import TimedPolicy as _TimedPolicy, capacity_types, cluster_config, policy_models
from zen_dev.sim.state import SimClusterState as _Cluster, SimJobState as _Job, SimMig as _Mig, SimVm as _Vm

_QUEUED, _RUNNING, _DONE = "QUEUED", "RUNNING", "DONE"
MAX_TICKS = 5_000_000  # a run longer than this many ticks is refused (about 9.5 years of 60 s ticks), not left to loop


class Simulation(InstanceWorld):
    """One policy against one scenario and job trace; :meth:`run` returns a :class:`RunResult`."""

    def __init__(self, scenario: Scenario, jobs: list[SimJob], policy: Policy, *,
                 seed: int | None = None, horizon_s: float | None = None):
        spec = scenario.spec
        self.policy, self.scenario = policy, scenario
        self.single_use = bool(getattr(policy, "single_use", False))
        self.cancel_losers = bool(getattr(policy, "cancel_losers_on_start", False))
        # Start routing by data (zen.core.routing) for the policies that have it: 0 s is none.
        self.data_wait = spec.routing.data_wait_s if getattr(policy, "routes_by_data", False) else 0.0
        self.route_min_gb = spec.routing.route_min_gb
        self.cache_gb, self.staging_mb_s = spec.routing.cache_gb, spec.routing.staging_mb_s
        self.unlimited = bool(getattr(policy, "ignores_capacity", False))
        self.capacity: CapacitySchedule = scenario.capacity
        self.timing = scenario.timing
        self.error_delay = spec.list_errors_delay_s
        self.pass_on_vm_heartbeat = spec.pass_on_vm_heartbeat
        self.pass_on_vm_running = spec.pass_on_vm_running and getattr(policy, "hears_running", False)
        self.preempt_on_drop = spec.preempt_on_capacity_drop and not self.unlimited
        self.watched: set[tuple[str, str]] = set()  # zones with a capacity-drop check scheduled
        self.start = spec.start_time
        seed = spec.seed if seed is None else seed
        self.boot_seed, self._boot_streams, self.preempt_rng = seed, {}, random.Random(f"preempt-{seed}")
        self.victim_rng = random.Random(f"victims-{seed}")  # which spot VMs a capacity drop takes
        self.flex = FlexGrants(self, seed)
        self.gangs = Gangs(self, hedged=bool(getattr(policy, "hedges_gangs", False)))
        last_submit = max((j.submit_s for j in jobs), default=0.0)
        self.horizon = horizon_s or spec.horizon_s or last_submit + spec.drain_s
        if not math.isfinite(self.horizon) or self.horizon / spec.tick_s > MAX_TICKS:
            raise ValueError(f"the run would end at {self.horizon:g} s (horizon_s, or the last submission + drain_s), "
                             f"over {MAX_TICKS:,} ticks of {spec.tick_s:g} s (tick_s): shorten the trace (--compression, "
                             "--max-jobs) or the horizon (--horizon-s)")
        self.clusters = {c.limits.name: _Cluster(c, policy_models(policy, c), capacity_types(scenario, c))
                         for c in scenario.clusters}
        unknown = {j.cluster for j in jobs} - set(self.clusters)
        if unknown:
            raise ValueError(f"jobs name cluster(s) the scenario does not define: {', '.join(sorted(unknown))}")
        limit = spec.limits.max_runtime_s  # a job's own max_runtime_s, else the cap (zen.jobs.placement)
        self.jobs = [_Job(j, self.clusters[j.cluster].pools_in(j.regions, j.provisioning), j.max_runtime_s or limit)
                     for j in jobs if j.submit_s <= self.horizon]
        self.by_zone: dict[tuple[str, str], list[_Mig]] = {}
        for cluster in self.clusters.values():
            for mig in cluster.migs.values():
                for zone in mig.zones:
                    self.by_zone.setdefault(mig.capacity_key(zone), []).append(mig)
        self.used: dict[tuple[str, str], int] = {}
        self.heap: list = []
        self.seq = itertools.count()
        self.names = itertools.count(1)
        self.now = 0.0
        self.result = RunResult(policy=policy.name, horizon_s=self.horizon, priced=spec.priced)
        self.admission = SimQueues(spec.queues, {c.limits.name: c.gpu_count for c in scenario.clusters},
                                   spec.queueing.usage_half_life_s) if spec.queues else None
        planner, fleet = _TimedPolicy(policy, self), SimFleet(self)
        self._clock_at: tuple = (None, None)
        self._dt_at: tuple = (None, None)
        self._capacity_at: tuple = (None, {})  # (instant, zone capacities looked up then)
        self._horizon_at = None  # the failures visible now, for every MIG read at this instant (zen_dev.sim.ports)
        for sim_cluster in scenario.clusters:
            cluster = self.clusters[sim_cluster.limits.name]
            migs = {key: SimMigPort(self, mig) for key, mig in cluster.migs.items()}
            timing = self.timing if sim_cluster.max_start_wait_s is None else replace(
                self.timing, max_start_wait_s=sim_cluster.max_start_wait_s)  # as production's (ClusterOrchestrator)
            cluster.start_bound_s = timing.max_start_wait_s  # its jobs' (zen_dev.sim.ports: the demand past it apart)
            cluster.manager = ClusterManager(cluster_config(sim_cluster, cluster.models, self.unlimited), fleet, migs,
                                             self.clock, timing, planner, telemetry=False, concurrent=False,
                                             pools=cluster.pools)

    # -- the loop -------------------------------------------------------------------------------
    def run(self) -> RunResult:
        wall = time.perf_counter()
        for job in self.jobs:
            self._push(job.spec.submit_s, _SUBMIT, self._submit, job)
        self._push(0.0, _TICK, self._periodic_tick)
        heap, pop = self.heap, heapq.heappop
        # What is here before the run (traces, jobs, the world) is not walked by each full collection; a process that
        # froze what it built before (a test process, after collecting the suite: tests/conftest.py) keeps it frozen,
        # which an unfreeze here would undo for the rest of its tests, and this run's objects are walked as before.
        own = gc.get_freeze_count() == 0
        if own:
            gc.freeze()
        try:
            while heap and heap[0][0] <= self.horizon:
                t, _, _, fn, args = pop(heap)
                self.now = t
                fn(*args)
        finally:
            if own:
                gc.unfreeze()
        self.now = self.horizon
        self._finish_run()
        self.result.wall_s = time.perf_counter() - wall
        return self.result

    def _finish_run(self) -> None:
        for cluster in self.clusters.values():
            for vm in cluster.vms.values():
                if vm.created_s is not None:
                    self._account(vm, self.horizon)
        self.result.starts = [(j.spec.submit_s, j.first_start_s) for j in self.jobs]
        self.result.preempted_jobs = sum(1 for j in self.jobs if j.preempted)
        self.gangs.finish_run(self.jobs)

    def dt(self, t: float):
        """The datetime of simulated second ``t``; the last one is kept (a read asks for the same
        moment for every failure of a retry round, and a pass for the same instant many times)."""
        last = self._dt_at
        if last[0] == t:
            return last[1]
        moment = self.start + timedelta(seconds=t)
        self._dt_at = (t, moment)
        return moment

    def clock(self):
        """The simulated time as the manager's clock (one datetime per instant)."""
        if self._clock_at[0] != self.now:
            self._clock_at = (self.now, self.dt(self.now))
        return self._clock_at[1]

    # -- ticks ----------------------------------------------------------------------------------
    def _periodic_tick(self) -> None:
        for cluster in self.clusters.values():
            if cluster.narrowed:  # the tick widens unclaimed starts first, then scales (as Zen.on_scale_tick)
                self._widen(cluster)
            if cluster.gangs:  # and gives back the parts of gangs past their assembly deadline
                self.gangs.expire(cluster)
            self._tick(cluster, listed=True)
            if cluster.gangs:  # and again after the pass, with the room it found since their claims
                self.gangs.expire(cluster)
        self._push(self.now + self.scenario.spec.tick_s, _TICK, self._periodic_tick)

    def _tick(self, cluster: _Cluster, listed: bool = False) -> None:
        """One pass of the production ``ClusterManager`` over this cluster. ``listed``: the periodic
        tick, which (as ``ClusterOrchestrator.tick``) lists each region's MIGs first, then reads them;
        a pass after a submission reads each MIG without the list (``ClusterManager.run()``)."""
        if cluster.last_tick == self.now:
            return  # one tick per instant (the advisory lock makes a second one skip)
        manager = cluster.manager
        memory = manager.memory()
        summaries: dict = {}
        regions = cluster.migs  # the manager's (its ports are these MIGs'; ``manager.regions`` makes a list per call)
        if listed:
            for region in regions:
                summaries.update(manager.mig(region).region_summaries())
        read = manager.read_mig
        states = {region: read(region, memory, summaries) for region in regions}
        report = manager.run(states)
        plan = manager.policy.last
        result = self.result
        result.ticks += 1
        cluster.last_tick = self.now
        cluster.passes += 1
        result.pass_times.append(self.now)
        # Refused by the manager: adds beyond the per-MIG or cluster limit, deletions of busy VMs.
        result.limit_violations += sum(max(0, n) for n in plan.add.values()) - sum(report.added.values())
        result.busy_delete_attempts += len(report.kept_busy)
        cluster.coverage = report.coverage

    # -- agents and jobs ------------------------------------------------------------------------
    def _booted(self, vm: _Vm, epoch: int) -> None:
        if vm.epoch != epoch:
            return
        vm.phase, vm.since, vm.booted_s = VmPhase.IDLE, self.now, self.now
        vm.touch()
        self._on_idle(vm)

    def _running(self, vm: _Vm, epoch: int) -> None:
        """The VM is RUNNING in its MIG's listing (billed; its guest boots): every pass sees it so."""
        if vm.epoch != epoch:
            return
        vm.touch()

    def _first_word(self, vm: _Vm, epoch: int) -> None:
        """The VM's startup script says it is up (``first_word_s`` after RUNNING, before its agent:
        ``zen.core.vm_heartbeat.VmUp``). While boots race, a policy that hears it (``pass_on_vm_running``)
        runs a pass, which deletes the boots it beat before they bill."""
        if vm.epoch != epoch:
            return
        cluster = vm.mig.cluster
        if self.pass_on_vm_running and racing(cluster.coverage):
            self._request_pass(cluster)

    def _request_pass(self, cluster: _Cluster) -> None:
        """A pass for this cluster now (after what else happens at this instant); one per instant."""
        if cluster.tick_at != self.now:
            cluster.tick_at = self.now
            self._push(self.now, _TICK, self._tick, cluster)

    def _on_idle(self, vm: _Vm) -> None:
        """A VM became usable (booted, or done with its job): a pass follows while boots are in flight,
        as ``Zen.on_heartbeat`` runs one; the VM takes the best queued job, or waits (or goes: single-use)."""
        cluster, region = vm.mig.cluster, vm.mig.key
        if self.pass_on_vm_heartbeat and racing(cluster.coverage):
            self._request_pass(cluster)
        heap = cluster.heaps[region]
        while heap:
            _, _, qseq, job = heapq.heappop(heap)
            if job.state is _QUEUED and job.qseq == qseq:
                if job.spec.nodes > 1:  # a gang: the VM claims a part (zen_dev.sim.gangs), or it assembles elsewhere
                    if self.gangs.take(vm, job):
                        return
                    continue
                self._start(vm, job)
                return
        if self.single_use:
            self._delete_at_once(vm)  # a single-use VM with nothing to run goes at once
            return
        cluster.idle[region][vm.name] = vm

    def _start(self, vm: _Vm, job: _Job) -> None:
        cluster = vm.mig.cluster
        job.state = _RUNNING
        if job.first_start_s is None:
            job.first_start_s = self.now
            self.result.start_regions.append((self.now, vm.mig.region))
        if job.spec.input_gb:
            stage(self.result, vm, job.spec, self.cache_gb, self.staging_mb_s)
        del cluster.queued[job.spec.job_id]
        jobs = cluster.groups.get((job.spec.priority, job.reach, job.terms))
        if jobs is not None and jobs.pop(job.spec.job_id, None) is not None:
            cluster.demand_view = None
        if job.widen_at is not None:
            cluster.narrowed.pop(job.spec.job_id, None)
            job.widen_at = None
        if self.cancel_losers:
            self._cancel_losers(cluster, job, vm.mig.key)
        vm.phase, vm.since, vm.job, vm.job_start_s = VmPhase.BUSY, self.now, job, self.now
        vm.touch()
        vm.epoch += 1
        self._push(self.now + job.attempt_s, _FINISH, self._finish, vm, vm.epoch)

    def _cancel_losers(self, cluster: _Cluster, job: _Job, won_in: str) -> None:
        """The job's requests in its other regions lost: cancel one surplus instance in each (one
        the remaining queue does not want there), waiting-for-capacity ones first, then the newest."""
        for region in job.pools:
            if region == won_in:
                continue
            booting = [vm for vm in cluster.migs[region].vms.values() if vm.phase is VmPhase.BOOTING]
            wanted = sum(len(jobs) for (_, regions, _), jobs in cluster.groups.items() if region in regions)
            wanted += self.gangs.wanted(cluster, region)
            if len(booting) <= wanted:
                continue
            loser = min(booting, key=lambda vm: (vm.created_s is not None, -vm.since, vm.name))
            self._delete_at_once(loser)

    def _finish(self, vm: _Vm, epoch: int) -> None:
        if vm.epoch != epoch:
            return
        vm.job.state = _DONE  # or FAILED, stopped at its max_runtime_s (its run billed, and useful: its own)
        self.result.stopped_at_max_runtime += vm.job.over_limit
        vm.busy_s += self.now - vm.job_start_s
        vm.jobs_run += 1
        if self.admission:
            for admitted in self.admission.release(vm.job, self.now):  # its quota goes to the next
                self._offer(admitted)
        vm.job = vm.job_start_s = None
        if self.single_use:
            vm.phase = VmPhase.IDLE  # for the instant of its deletion
            self._delete_at_once(vm)
            return
        vm.phase, vm.since = VmPhase.IDLE, self.now
        vm.touch()
        vm.epoch += 1
        self._on_idle(vm)

    def _offer(self, job: _Job) -> None:
        """An idle VM in a region the job's start reaches takes it at once; otherwise it is queued.
        With ``routes_by_data`` (zen) a job whose input weighs ``route_min_gb`` reaches only its data's
        region until the first tick after ``data_wait_s`` widens it (``_widen``), as ``zen.core.routing``
        routes a new attempt's start message; its demand meanwhile is for that region only."""
        job.queued_s = job.published_s = self.now  # queued (submitted, admitted, or again after a preemption)
        if job.spec.nodes > 1:
            self.gangs.offer(job)  # a gang: its parts offered, its demand the planner's (zen_dev.sim.gangs)
            return
        cluster, spec = self.clusters[job.spec.cluster], job.spec
        job.state, job.reach = _QUEUED, job.pools
        holder = warm_vm(cluster, job) if self.data_wait and self.cache_gb and spec.dataset else None
        if holder is not None:  # zen offers it first to the idle VMs holding its input: that VM takes it
            job.reach = (holder.mig.key,)
            cluster.queued[spec.job_id] = job
            del cluster.idle[holder.mig.key][holder.name]
            self._start(holder, job)
            return
        near = cluster.pools_in((spec.data_region,), spec.provisioning) if spec.data_region else ()
        if (self.data_wait and spec.data_region and spec.input_gb >= self.route_min_gb and len(spec.regions) > 1
                and not blocked(cluster, near, self.clock())):
            job.reach, job.widen_at = near, self.now + self.data_wait
            cluster.narrowed[spec.job_id] = job
        cluster.queued[spec.job_id] = job
        if self._take_idle(cluster, job, job.reach):
            return
        job.qseq = next(self.seq)
        cluster.groups.setdefault((spec.priority, job.reach, job.terms), {})[spec.job_id] = job.queued_s
        cluster.demand_view = None
        for region in job.reach:
            heapq.heappush(cluster.heaps[region], (-spec.priority, job.published_s, job.qseq, job))

    def _take_idle(self, cluster: _Cluster, job: _Job, regions: tuple[str, ...]) -> bool:
        """The most recently idle VM of the first of ``regions`` that has one starts the job."""
        for region in regions:
            idle = cluster.idle.get(region)
            if idle:
                _, vm = idle.popitem()
                self._start(vm, job)
                return True
        return False

    def _widen(self, cluster: _Cluster) -> None:
        """Starts narrowed near their data whose wait is over now reach every allowed region: an idle
        VM there takes the job at once, else the job waits in every region's queue and the planner's
        demand for it covers them all."""
        narrowed = cluster.narrowed
        while narrowed:
            job = next(iter(narrowed.values()))  # offered in time order, so due in that order
            if job.widen_at > self.now:
                return
            spec = job.spec
            del narrowed[spec.job_id]
            job.widen_at = None
            cluster.groups[(spec.priority, job.reach, job.terms)].pop(spec.job_id)
            cluster.demand_view = None
            others = tuple(r for r in job.pools if r not in job.reach)
            job.reach, job.published_s = job.pools, self.now  # its start published again, to every region
            if self._take_idle(cluster, job, others):
                continue
            cluster.groups.setdefault((spec.priority, job.pools, job.terms), {})[spec.job_id] = job.queued_s
            for region in others:
                heapq.heappush(cluster.heaps[region], (-spec.priority, job.published_s, job.qseq, job))

    def _submit(self, job: _Job) -> None:
        for admitted in (self.admission.submit(job, self.now) if self.admission else [job]):
            self._offer(admitted)  # with queues, only what its queue's quota admits now
        cluster = self.clusters[job.spec.cluster]
        cluster.arrivals.append(self.now)
        if (job.spec.nodes > 1 or cluster.coverage is None
                or not cluster.coverage.covers(self.dt(self.now), regions=job.pools)):
            self._request_pass(cluster)  # as production (Zen.on_job_submitted): a gang, or demand no spare VM covers

    def _preempt(self, vm: _Vm, created_s: float) -> None:
        if vm.created_s != created_s or vm.phase is VmPhase.DELETING or vm.mig.vms.get(vm.name) is not vm:
            return
        self.result.preemptions += 1
        mig, job = vm.mig, vm.job
        kept = kept_s(job, self.now - vm.job_start_s) if job is not None else 0.0
        self._account(vm, self.now, preempted=True,  # its stop billed up to the end of the run, as every VM is
                      stop_s=min(self.scenario.spec.preemption.stop_s, max(0.0, self.horizon - self.now)))
        # One fate: a gang's other nodes end the attempt too (freed once the gang is queued again).
        others = self.gangs.abort(job, vm) if job is not None and job.spec.nodes > 1 else None
        if job is not None:
            job.left_s -= kept  # the rerun resumes from its last checkpoint
        self._release(vm)
        if vm.phase is VmPhase.IDLE:
            mig.cluster.idle[mig.key].pop(vm.name, None)
        if vm.part is not None:  # it held a part of an assembling gang: it leaves it
            self.gangs.leave(vm)
        zone = vm.zone
        vm.epoch += 1
        vm._reset(self.now)  # the MIG recreates the instance under the same name
        vm.first_seen = self.dt(self.now)  # its boot dates from now, as production's from its agent's STOPPING
        if job is not None:
            job.preempted += 1
            self._offer(job)
        if others is not None:
            self.gangs.free_all(job, others)
        self._attempt(mig, vm)
        self._capacity_freed(*mig.capacity_key(zone))
