"""The simulated world's mutable state: jobs, instances, regional MIGs and clusters (no logic).

``zen_dev.sim.world`` owns every change to these; they are plain slotted records for speed.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque

from zen.scaling.model import DemandGroup, VmPhase
from zen_dev.sim.jobs import SimJob
from zen_dev.sim.scenario import SimCluster


class SimJobState:
    __slots__ = ("spec", "state", "first_start_s", "qseq", "view", "preempted", "reach", "widen_at")

    def __init__(self, spec: SimJob):
        self.spec, self.state, self.first_start_s, self.qseq, self.preempted = spec, None, None, 0, 0
        self.view = None
        self.reach, self.widen_at = spec.regions, None  # the regions its start reaches now (zen.core.routing)


class SimVm:
    __slots__ = ("name", "mig", "phase", "since", "zone", "created_s", "running_s", "booted_s", "job", "job_start_s",
                 "error", "wait_since", "jobs_run", "busy_s", "epoch", "view", "first_seen", "cache")

    def __init__(self, name: str, mig: "SimMig", now: float):
        self.name, self.mig, self.epoch = name, mig, 0
        self.first_seen = None  # when a pass first listed it (kept when the MIG recreates it: same name)
        self._reset(now)

    def _reset(self, now: float) -> None:
        self.phase, self.since, self.zone = VmPhase.BOOTING, now, None
        self.touch()
        self.created_s = self.running_s = self.booted_s = self.job = self.job_start_s = self.error = None
        self.wait_since = None
        self.jobs_run, self.busy_s = 0, 0.0
        self.cache: OrderedDict[str, float] = OrderedDict()  # its warm cache: dataset -> GB, least recent first

    def touch(self) -> None:
        """The VM changed (or comes or goes): drop the views ``zen_dev.sim.ports`` keeps of it and its
        MIG's listing, and note it for its cluster's agents and held jobs."""
        self.view = None  # (MigInstance, agent) as the ports show them
        self.mig.listing = None
        self.mig.cluster.changed[self.name] = self


class SimMig:
    __slots__ = ("cluster", "region", "name", "zones", "machine_type", "vms", "target", "waiting",
                 "anchor", "retry_at", "errors", "errors_until", "round_robin", "listing",
                 "next_capacity_change", "usd_per_hour")

    def __init__(self, cluster: "SimClusterState", region: str, zones: tuple[str, ...]):
        self.cluster, self.region, self.zones = cluster, region, zones
        self.name = f"zen-{cluster.limits.name}-{region}"
        self.machine_type = cluster.machine_type
        self.usd_per_hour = cluster.prices[region] if cluster.prices else None  # as its VMs run (None: unpriced)
        self.vms: dict[str, SimVm] = {}  # every instance, DELETING included (they count against limits)
        self.waiting: dict[str, SimVm] = {}  # instances without capacity yet
        self.target, self.anchor, self.retry_at, self.round_robin = 0, 0.0, None, 0
        # Failures not yet reported by a snapshot (maybe not yet visible): instance -> their times.
        self.errors: dict[str, tuple[float, ...]] = {}
        self.errors_until = -math.inf  # retry failures up to here are already in ``errors`` or reported
        self.listing = None  # (instances, all settled, valid until): the MIG's last listing, see zen_dev.sim.ports
        self.next_capacity_change = None  # (at, the zones' next capacity change after it or None)


class SimClusterState:
    def __init__(self, sim: SimCluster):
        self.limits, self.machine_type, self.gpu_count = sim.limits, sim.machine_type, sim.gpu_count
        self.prices = sim.prices
        # The price floor per GPU-second: the cheapest listed VM-hour among its regions and models.
        self.floor_usd_per_gpu_s = (sim.floor_usd_per_vm_hour / 3600.0 / sim.gpu_count
                                    if sim.floor_usd_per_vm_hour is not None else 0.0)
        self.migs = {r: SimMig(self, r, sim.zones[r]) for r in sim.limits.regions}
        self.queued: dict[str, SimJobState] = {}
        # Queued jobs by (priority, regions their start reaches): job id -> submit time, in queueing order.
        self.groups: dict[tuple[int, tuple[str, ...]], dict[str, float]] = {}
        self.demand_view: tuple[DemandGroup, ...] | None = None
        self.fleet_view = None  # (held, agents) as zen_dev.sim.ports last built them
        self.fleet_since = None  # (the held and agents before, the VMs changed since): FleetFacts.changed
        self.changed: dict[str, SimVm] = {}  # VMs touched since (by name): their entries are rebuilt
        self.facts_view = None  # the FleetFacts zen_dev.sim.ports last gave
        self.seen_view = None  # (name lists, first seen) as zen_dev.sim.ports.SimFleet.see_instances last gave them
        self.narrowed: dict[str, SimJobState] = {}  # queued jobs offered near their data only, widen_at order
        self.heaps: dict[str, list] = {r: [] for r in sim.limits.regions}
        self.idle: dict[str, dict[str, SimVm]] = {r: {} for r in sim.limits.regions}
        self.vms: dict[str, SimVm] = {}
        self.memory: dict = {}
        self.manager = None  # the production ClusterManager over this cluster's simulated MIGs (zen_dev.sim.world)
        self.last_tick, self.tick_at = -math.inf, None
        self.coverage = None  # what the last pass said about one more job (zen.scaling.model.Coverage)
        self.arrivals: deque[float] = deque()  # submission times, for the planner's warm pool
