"""The simulated world's mutable state: jobs, instances, regional MIGs and clusters (no logic).

``zen_dev.sim.world`` owns every change to these; they are plain slotted records for speed.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque

from zen.core.provisioning import MIG_SUFFIX, accepted_models, pool_key
from zen.scaling.model import DemandGroup, Pool, VmPhase
from zen_dev.sim.jobs import SimJob
from zen_dev.sim.scenario import SimCluster


class SimJobState:
    __slots__ = ("spec", "state", "first_start_s", "qseq", "view", "preempted", "reach", "widen_at", "pools",
                 "left_s", "terms", "parts", "nodes_vms", "attempt", "assemble_until", "gang_reach",
                 "claimed_before", "queued_s", "published_s", "max_runtime_s")

    def __init__(self, spec: SimJob, pools: tuple[str, ...], max_runtime_s: float = math.inf):
        self.spec, self.state, self.first_start_s, self.qseq, self.preempted = spec, None, None, 0, 0
        # Each attempt's limit (zen.jobs.placement: the job's own, else limits.max_runtime_s); the agent stops a
        # run at it, and the job ends FAILED, never rerun (zen.agent.attempt). A rerun after a preemption gets it again.
        self.max_runtime_s = max_runtime_s
        self.view = None
        self.pools = pools  # where it may run: its regions x the models it accepts (zen.core.provisioning)
        self.reach, self.widen_at = pools, None  # the pools its start reaches now (zen.core.routing)
        self.left_s = spec.duration_s  # run time still to do (less after a checkpoint survives a preemption)
        # What its demand group is by, besides its priority and reach: how often it checkpoints (None: never) and its
        # own start bound (None: its cluster's), as production's queued_demand groups them.
        self.terms = (spec.checkpoint_every_s, spec.max_start_wait_s)
        # Production's ``queued_at``: its submission (or admission), or its requeue after a preemption or a
        # lost node; the planner counts its start bound from it (``Ranking.patient``). A gang's new attempt
        # after its assembly was given back stays QUEUED, and keeps it.
        self.queued_s = spec.submit_s
        # When its start was last published (``start_published_at``): agents take queued starts in this
        # order, as Pub/Sub hands out roughly the oldest message first (``zen_dev.sim.world``).
        self.published_s = spec.submit_s
        # A gang's (spec.nodes > 1, zen_dev.sim.gangs): the VMs holding a part while it assembles, the
        # VMs running it, its attempt, its assembly deadline (first claim + assemble_s), where it assembles.
        self.parts: list[SimVm] = []
        self.nodes_vms: list[SimVm] = []
        self.attempt, self.assemble_until, self.gang_reach = 0, None, None
        self.claimed_before = 0  # the cluster's passes done when its last part was claimed (zen_dev.sim.gangs)

    @property
    def attempt_s(self) -> float:
        """How long its next attempt runs: what is left of its work, at most its ``max_runtime_s``."""
        return min(self.left_s, self.max_runtime_s)

    @property
    def over_limit(self) -> bool:
        """Whether its attempt ends at its ``max_runtime_s`` with work left: stopped there, the job FAILED."""
        return self.left_s > self.max_runtime_s


class SimVm:
    __slots__ = ("name", "mig", "phase", "since", "zone", "created_s", "running_s", "booted_s", "job", "job_start_s",
                 "error", "wait_since", "jobs_run", "busy_s", "lost_s", "epoch", "view", "first_seen", "cache", "part", "claimed_s")

    def __init__(self, name: str, mig: "SimMig", now: float):
        self.name, self.mig, self.epoch = name, mig, 0
        self.first_seen = None  # when a pass first listed it (kept when the MIG recreates it: same name)
        self._reset(now)

    def _reset(self, now: float) -> None:
        self.phase, self.since, self.zone = VmPhase.BOOTING, now, None
        self.touch()
        self.created_s = self.running_s = self.booted_s = self.job = self.job_start_s = self.error = None
        self.wait_since = None
        self.part = self.claimed_s = None  # the gang it holds a part of while that assembles, since when
        self.jobs_run, self.busy_s = 0, 0.0
        self.lost_s = 0.0  # of busy_s, runs thrown away already counted as rework (a gang's other nodes: zen_dev.sim.gangs)
        self.cache: OrderedDict[str, float] = OrderedDict()  # its warm cache: dataset -> GB, least recent first

    def touch(self) -> None:
        """The VM changed (or comes or goes): drop the views ``zen_dev.sim.ports`` keeps of it and its
        MIG's listing, and note it for its cluster's agents and held jobs."""
        self.view = None  # (MigInstance, agent) as the ports show them
        self.mig.listing = None
        self.mig.cluster.changed[self.name] = self


class SimMig:
    __slots__ = ("cluster", "region", "key", "model", "name", "zones", "machine_type", "vms", "target", "waiting",
                 "anchor", "retry_at", "errors", "errors_until", "round_robin", "listing",
                 "next_capacity_change", "usd_per_hour", "preemptible", "capacity_types", "sold")

    def __init__(self, cluster: "SimClusterState", key: str, pool: Pool, zones: tuple[str, ...], primary: bool,
                 capacity_types: dict[str, str], sold: bool = True):
        self.cluster, self.region, self.key, self.model, self.zones = cluster, pool.region, key, pool.model, zones
        self.name = f"zen-{cluster.limits.name}-{pool.region}" + ("" if primary else f"-{MIG_SUFFIX[pool.model]}")
        self.machine_type = cluster.machine_type
        # Zone -> the capacity it draws on there: its machine type's, or its model's own where it has one.
        self.capacity_types = {zone: capacity_types.get(zone, self.machine_type) for zone in zones}
        self.usd_per_hour = pool.usd_per_hour  # as its VMs run (None: unpriced)
        self.preemptible = pool.model == "spot"  # GCE takes spot VMs back; standard and flex-start run on
        self.sold = sold  # its region's prices list its model (else no capacity: zen_dev.sim.scenario.close_unsold)
        self.vms: dict[str, SimVm] = {}  # every instance, DELETING included (they count against limits)
        self.waiting: dict[str, SimVm] = {}  # instances without capacity yet
        self.target, self.anchor, self.retry_at, self.round_robin = 0, 0.0, None, 0
        # Failures not yet reported by a snapshot (maybe not yet visible): instance -> their times.
        self.errors: dict[str, tuple[float, ...]] = {}
        self.errors_until = -math.inf  # retry failures up to here are already in ``errors`` or reported
        self.listing = None  # (instances, all settled, valid until): the MIG's last listing, see zen_dev.sim.ports
        self.next_capacity_change = None  # (at, the zones' next capacity change after it or None)

    def capacity_key(self, zone: str) -> tuple[str, str]:
        """(zone, the capacity its VMs draw on there): the key of ``zen_dev.capacity``'s schedule and counts."""
        return zone, self.capacity_types[zone]


class SimClusterState:
    def __init__(self, sim: SimCluster, models: tuple[str, ...], capacity_types: dict[str, str]):
        """``models``: the provisioning models the policy's world has MIGs for (the primary first);
        ``capacity_types``: model -> zone -> the capacity its VMs draw on there (``zen_dev.capacity``)."""
        self.limits, self.machine_type, self.gpu_count = sim.limits, sim.machine_type, sim.gpu_count
        # The price floor per GPU-second: the cheapest listed VM-hour among its regions and models.
        self.floor_usd_per_gpu_s = (sim.floor_usd_per_vm_hour / 3600.0 / sim.gpu_count
                                    if sim.floor_usd_per_vm_hour is not None else 0.0)
        self.models, self.pools = models, sim.pools(models)
        self.migs = {key: SimMig(self, key, pool, sim.zones[pool.region], pool.model == models[0],
                                 capacity_types.get(pool.model, {}), sim.sells(pool.region, pool.model))
                     for key, pool in self.pools.items()}
        self.queued: dict[str, SimJobState] = {}
        # Queued jobs by (priority, pools their start reaches, their terms: SimJobState.terms): job id -> submit
        # time, in queueing order.
        self.groups: dict[tuple[int, tuple[str, ...], tuple[float | None, float | None]], dict[str, float]] = {}
        self.demand_view: tuple[DemandGroup, ...] | None = None
        self.demand_until = math.inf  # when a queued job of the view passes its start bound (zen_dev.sim.ports)
        self.start_bound_s = math.inf  # its jobs' start bound (the cluster's max_start_wait_s, else the timing's)
        self.fleet_view = None  # (held, agents) as zen_dev.sim.ports last built them
        self.fleet_since = None  # (the held and agents before, the VMs changed since): FleetFacts.changed
        self.changed: dict[str, SimVm] = {}  # VMs touched since (by name): their entries are rebuilt
        self.facts_view = None  # the FleetFacts zen_dev.sim.ports last gave
        self.seen_view = None  # (name lists, first seen) as zen_dev.sim.ports.SimFleet.see_instances last gave them
        self.narrowed: dict[str, SimJobState] = {}  # queued jobs offered near their data only, widen_at order
        self.heaps: dict[str, list] = {key: [] for key in self.pools}
        self.idle: dict[str, dict[str, SimVm]] = {key: {} for key in self.pools}
        self.vms: dict[str, SimVm] = {}
        self.memory: dict = {}
        self.manager = None  # the production ClusterManager over this cluster's simulated MIGs (zen_dev.sim.world)
        self.last_tick, self.tick_at = -math.inf, None
        self.passes = 0  # passes done (a gang's room counts from a pass after its last claim)
        self.coverage = None  # what the last pass said about one more job (zen.scaling.coverage.Coverage)
        self.arrivals: deque[float] = deque()  # submission times, for the planner's warm pool
        self.gangs: dict[str, SimJobState] = {}  # queued gangs (zen_dev.sim.gangs), by job id, in queueing order

    def pools_in(self, regions: tuple[str, ...], accepts: str | None = None) -> tuple[str, ...]:
        """The pools of ``regions`` (in that order), each region's models in the cluster's order; of the
        model ``accepts`` only where this world has several (a policy keeping to one model runs every job on
        it: the original system ran every job on standard VMs). A world of several models without ``accepts``
        is refused (the job could never start)."""
        models = self.models if len(self.models) == 1 else accepted_models(accepts, self.models)
        if not models:
            raise ValueError(f"a job accepts provisioning {accepts!r}, which cluster {self.limits.name} does not "
                             f"list ({', '.join(self.models)})")
        return tuple(pool_key(r, m, self.models[0]) for r in regions for m in models)  # as zen.jobs.service
