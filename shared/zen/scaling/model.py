"""The plain data the scaling planners read and write: one snapshot per cluster in, one plan out.

Nothing here does I/O. ``ClusterManager`` builds a ``ClusterSnapshot`` from Postgres and the MIGs; the simulator
builds the same from its simulated world. Every policy (Zen's planner and the baselines) is a ``Policy``:
``plan(snapshot) -> Plan``. The planner's memory between ticks (which regions stocked out, since when, when to probe
again) lives in ``RegionMemory`` values that a plan returns and the next snapshot carries, so the planner stays pure."""

from __future__ import annotations

import enum
import math
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from datetime import datetime
from typing import Any, Iterable, Protocol


class ErrorKind(str, enum.Enum):
    """Why a MIG could not create an instance, translated at the edge from Compute error codes."""

    STOCKOUT = "STOCKOUT"  # ZONE_RESOURCE_POOL_EXHAUSTED, insufficientCapacity, ...
    QUOTA = "QUOTA"  # QUOTA_EXCEEDED
    RATE_LIMIT = "RATE_LIMIT"  # rateLimitExceeded
    OTHER = "OTHER"


class VmPhase(str, enum.Enum):
    BOOTING = "BOOTING"  # asked for; not yet running the agent (CREATING, PROVISIONING, STAGING, agent starting)
    IDLE = "IDLE"  # agent up, no job: can take queued work at once
    BUSY = "BUSY"  # holds a job (claimed, running or stopping): never removed
    DELETING = "DELETING"  # on its way out; counts against limits until gone


@dataclass(frozen=True)
class Vm:
    name: str
    region: str
    phase: VmPhase
    since: datetime  # when it entered this phase (asked for, went idle, ...)
    zone: str | None = None
    job_id: str | None = None
    creation_error: ErrorKind | None = None  # last failed creation attempt, while BOOTING
    started: bool = False  # BOOTING with capacity (PROVISIONING/STAGING/RUNNING): billed soon or now, no free probe
    heard_at: datetime | None = None  # its agent last heard (silence counts from here; see zen.scaling.vms)
    running: bool = False  # BOOTING and Compute lists it RUNNING: billed, its guest booting, usable soon
    retiring: bool = False  # DELETING because Zen retires it (a pull limit, a drain), not because GCE took it
    first_heard_at: datetime | None = None  # its agent's first word (a flex-start VM's run: zen.scaling.flexrun)
    running_at: datetime | None = None  # a scaling pass first saw its VM RUNNING (GCE counts a flex-start run from it)
    model: str | None = None  # the provisioning model a scaling pass recorded for it; None: its pool's (zen.scaling.flexrun)

    def silent_s(self, now: datetime) -> float:
        """Seconds its agent has not been heard at ``now``; 0 when it never was."""
        return 0.0 if self.heard_at is None else (now - self.heard_at).total_seconds()


@dataclass(frozen=True)
class MigError:
    region: str
    kind: ErrorKind
    at: datetime  # the failure (the last of them when ``count`` > 1)
    instance: str | None = None
    count: int = 1  # failures this stands for: Compute reports each; the simulator folds an instance's retries
    detail: str | None = None  # why, in words (no instance: the quota read before asking, ClusterManager.quota_short)
    quota: str | None = None  # the quota Compute's QUOTA_EXCEEDED named (zen.core.quotas.named)


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    regions: tuple[str, ...]  # allowed pools (zen.core.provisioning: regions x models), in preference order
    queued_at: datetime
    priority: int = 0
    max_wait_s: float | None = None  # how long it may wait for a start before a costlier pool is worth it
    checkpoint_every_s: float | None = None  # it saves its work this often (None: not): a preemption costs half that


@dataclass(frozen=True)
class DemandGroup:
    """Queued jobs that allow the same pools at the same priority: the planner's unit of demand (O(groups x pools))."""

    regions: tuple[str, ...]  # allowed pools (regions x models), in the cluster's preference order
    count: int
    oldest: datetime  # queued_at of the oldest job of the group (orders groups of equal priority)
    priority: int = 0
    max_wait_s: float | None = None  # QueuedJob.max_wait_s of its jobs (None: the cluster's default)
    checkpoint_every_s: float | None = None  # QueuedJob.checkpoint_every_s of its jobs
    gang: int = 1  # the nodes of each of its jobs: > 1, gangs (zen.core.gang), count their VMs, each gang in one region
    part: int = 0  # the VMs each of its gangs still needs (its nodes not claimed yet); 0: all ``gang``
    longest_s: float | None = None  # its jobs' longest max_runtime_s (None: none named one; zen.scaling.flexrun)
    accepts: str | None = None  # the one model its jobs accept (None: any): no idle VM recorded as another is theirs
    egress: tuple[tuple[str, float], ...] = ()  # region -> USD a VM's job's inputs cost read there (zen.scaling.egress)

    def chunks(self) -> list[int]:
        """The VMs it needs, one entry per gang (each all in one region); one entry per VM for ordinary jobs.
        Gangs partly claimed need fewer (their claimed nodes are not demand): gangs needing as many are one
        group (``part``), so each entry is what one gang needs."""
        size = 1 if self.gang == 1 else self.part or self.gang
        return [size] * (self.count // size) + ([self.count % size] if self.count % size else [])


# (priority, pools, start bound, checkpoint interval, nodes per job, nodes each still needs: 0 all, model accepted)
DemandKey = tuple[int, tuple[str, ...], "float | None", "float | None", int, int, "str | None"]


def fold_demand(parts: Iterable[tuple[DemandKey, int, datetime, float | None]]) -> tuple[DemandGroup, ...]:
    """``(key, jobs, oldest, longest max_runtime_s)`` parts summed into one group per key, in first-come order."""
    groups: dict[DemandKey, list[Any]] = {}  # key -> [count, oldest, longest]
    for key, count, oldest, longest in parts:
        if (group := groups.get(key)) is None:
            groups[key] = [count, oldest, longest]
        else:
            group[0] += count
            group[1] = min(group[1], oldest)
            group[2] = max((s for s in (group[2], longest) if s is not None), default=None)
    return tuple(DemandGroup(pools, count, oldest, priority, max_wait, every, gang, part, longest, accepts)
                 for (priority, pools, max_wait, every, gang, part, accepts), (count, oldest, longest) in groups.items())


def group_demand(queued: tuple[QueuedJob, ...]) -> tuple[DemandGroup, ...]:
    """Aggregate queued jobs by (priority, allowed pools, start bound, checkpoint interval)."""
    return fold_demand(((job.priority, job.regions, job.max_wait_s, job.checkpoint_every_s, 1, 0, None), 1,
                        job.queued_at, None) for job in queued)


@dataclass(frozen=True)
class RegionMemory:
    """What a planner remembers about one region of one cluster between ticks."""
    blocked_until: datetime | None = None  # do not ask this region for VMs before then
    strikes: int = 0  # consecutive stockouts; the block doubles with each
    last_stockout_at: datetime | None = None
    last_boot_at: datetime | None = None  # a VM there last became usable
    seen_errors_until: datetime | None = None  # MIG errors up to here are already accounted for
    booting: tuple[str, ...] = ()  # VMs that were booting at the last plan (to notice boots)
    known: tuple[str, ...] = ()  # every VM of the region at the last plan
    booting_since: tuple[float, ...] = ()  # when each of ``booting`` was asked for (epoch seconds)
    boot_s: float | None = None  # learned: moving average of asked-to-usable seconds in this region
    started: tuple[str, ...] = ()  # booting VMs that had got capacity (``Vm.started``) at the last plan
    started_since: tuple[float, ...] = ()  # when a plan first saw each of ``started`` so (epoch seconds)
    # Preemptions (zen.scaling.preemptions): the busy VMs at the last plan, since when (epoch seconds), the job each held
    # (none kept: runs going on); when runs were last folded in, the average run, decayed sums of runs and runs cut short.
    busy: tuple[str, ...] = ()
    busy_since: tuple[float, ...] = ()
    busy_jobs: tuple[str | None, ...] = ()
    runs_seen_s: float | None = None
    run_s: float | None = None
    busy_s: float = 0.0
    lost_s: float = 0.0
    preempted: float = 0.0
    # The VMs a gang assembling here could still get at the last plan (None: not planned since): idle and
    # healthy booting ones, plus the room left under max_vms_per_region and max_vms (zen.core.gang); and
    # when that plan read the fleet and the jobs (its snapshot's now: a claim after it is not counted).
    gang_room: int | None = None
    gang_room_at: datetime | None = None
    # The last GPU quota read (the tick's, zen.scaling.quotas) where a quota of the pool's has room for fewer VMs than
    # its pools could ask: how many more (asks held to it; under a region's worth, no spare), VMs listed then. None: not.
    quota_room: int | None = None
    quota_listed: int = 0
    quota_shared: tuple[tuple[str, int], ...] = ()  # the quotas behind it, which other pools count against too
    quota_block: str = ""  # its block's quota: "read", the tick's read; "refused", Compute's (probes.quota_kind)
    resize_failed: str = ""  # its block's cause when its MIG's resize failed (applied.struck): Compute's words; else ""
    # The MIG's target size after the last pass's writes (its adds, unconfirmed ones too): what it is taken to hold
    # while it cannot be read (zen.scaling.unread), with the VMs that pass asked for, not yet listed.
    sized: int = 0
    silent: int = 0  # VMs in a row that got capacity here and were never usable (zen.scaling.probes.silent_boot)

    def replaced(self, **changes: Any) -> RegionMemory:
        """``dataclasses.replace(self, **changes)`` (``changes`` names fields only) without the frozen ``__init__``, which
        sets each field through ``object.__setattr__``: the fields copied and set whole (a few per region and pass)."""
        new, fields = object.__new__(RegionMemory), self.__dict__.copy()
        fields.update(changes)
        object.__setattr__(new, "__dict__", fields)
        return new


@dataclass(frozen=True)
class Pool:
    """Where a cluster's VMs come from: one provisioning model in one region (``zen.core.provisioning``),
    one MIG. The planners' per-"region" maps are keyed by pool (the primary model's by the bare region)."""

    region: str
    model: str = "standard"
    usd_per_hour: float | None = None  # the VM's price in this pool; None: unpriced


@dataclass(frozen=True)
class ClusterLimits:
    name: str
    regions: tuple[str, ...]  # its pools (zen.core.provisioning; with one model, its regions), preference order
    max_vms_per_region: int  # per pool
    max_vms: int
    min_vms: int = 0
    pools: dict[str, Pool] | None = None  # pool key -> what it is; None: each key a region of one unpriced model
    flex_run_s: float | None = None  # a flex-start VM's run (flex_start_run_s); None: not known (zen.scaling.flexrun)
    shared: bool = False  # its demand counts VMs, several queued jobs packed on each (zen.scaling.sharing)

    def pool(self, key: str) -> Pool:
        found = self.pools.get(key) if self.pools is not None else None
        return found if found is not None else Pool(key)


@dataclass(frozen=True)
class Timing:
    boot_timeout_s: float = 600  # a VM not usable after this is stuck: its region is not delivering
    idle_timeout_s: float = 300  # idle VMs beyond min_vms are deleted after this
    block_s: float = 180  # first stockout block (Karpenter remembers 3 minutes); doubles per strike
    max_block_s: float = 900
    spill_after_s: float = 240  # a VM booting this long has not delivered: its demand spills over
    boot_estimate_s: float = 120  # how long a new VM takes to be usable (sizes the warm pool)
    idle_grace_s: float = 30  # an idle VM outside the warm pool goes after this
    trust_s: float = 3600  # a stockout weighs on a region's rank for about this long (decay constant)
    hedge_risk: float = 0.0  # hedge a boot in a second region when the first's risk is above this
    preference_s: float = 15  # seconds of expected boot one step down the preference order is worth
    keep_factor: float = 1.0  # ski rental: a cold start costs keep_factor x the region's boot time
    agent_silence_s: float = 180  # an agent unheard this long is no supply (zen.core.lease.agent_silence_s)
    cost_slack_s: float = 120  # priced pools: one expected this much slower than the fastest may win on price
    hedge_price_ratio: float = 1.25  # priced pools: a hedge costs at most this x its first choice's price
    flex_start_estimate_s: float = 900  # a flex-start pool's asked-to-usable time (not learned: Ranking.boot_s)
    flex_end_margin_s: float = 900  # a flex-start VM's run kept past a job's max_runtime_s (zen.scaling.flexrun)
    max_start_wait_s: float = 600  # a job's default start bound: past it, its demand ranks pools by speed alone
    spare_boots: bool = True  # priced pools: a one-VM job races a spare boot in its pool (Ranking.races_spare)


@dataclass(frozen=True)
class ClusterSnapshot:
    now: datetime
    cluster: ClusterLimits
    queued: tuple[QueuedJob, ...]
    vms: tuple[Vm, ...]
    target_sizes: dict[str, int]  # region -> MIG target size
    errors: tuple[MigError, ...] = ()  # recent MIG errors (may repeat ones seen before)
    memory: dict[str, RegionMemory] = field(default_factory=dict)
    timing: Timing = Timing()
    arrivals_last_hour: int = 0  # jobs submitted to this cluster in the last hour (sizes the warm pool)
    demand: tuple[DemandGroup, ...] | None = None  # queued jobs aggregated; None: computed from ``queued``
    unread: frozenset[str] = frozenset()  # regions whose MIG could not be read this pass (no VMs, no errors)
    quota_room: dict[str, int] | None = None  # pool -> VMs a GPU quota leaves room for, as this tick read; None: memory's
    heard_since: datetime | None = None  # Zen heard its agents again after an outage of its own (FleetFacts)
    oldest_queued: datetime | None = None  # the oldest QUEUED job's queued_at, in ``demand`` or not (FleetFacts)

    def demand_groups(self) -> tuple[DemandGroup, ...]:
        return self.demand if self.demand is not None else group_demand(self.queued)


class Action(str, enum.Enum):
    ADD = "ADD"
    DELETE = "DELETE"
    BLOCK = "BLOCK"
    UNBLOCK = "UNBLOCK"
    HOLD = "HOLD"  # demand left unserved on purpose (limits, every region blocked)
    ERROR = "ERROR"  # a pass that failed (ClusterOrchestrator.scale): nothing planned, the next one tries again


@dataclass(frozen=True)
class Decision:
    """One decision and why, for logs, the decisions table and ``zen explain``."""

    action: Action
    region: str | None
    reason: str
    count: int = 0
    vm: str | None = None


@dataclass
class Plan:
    add: dict[str, int] = field(default_factory=dict)  # region -> new VMs to ask for
    delete: list[tuple[str, str]] = field(default_factory=list)  # (region, vm name)
    memory: dict[str, RegionMemory] = field(default_factory=dict)  # to carry into the next snapshot
    decisions: list[Decision] = field(default_factory=list)
    # pool -> the gangs asked for there (the VMs each needs, counted in ``add`` too): each must come whole,
    # so a flex-start pool asks for each in a resize request of its own (``MigPort.resize``)
    together: dict[str, list[int]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.add and not self.delete


class RegionVms:
    """One region's VMs in order, and by phase: a part of a ``VmIndex``, built once and kept while the
    region's VMs are the same (``ClusterManager`` keeps one per region)."""

    __slots__ = ("vms", "phases", "names", "usable", "busy")

    def __init__(self, vms: Iterable[Vm]):
        self.vms = tuple(vms)
        self.names = tuple(vm.name for vm in self.vms)
        phases: dict[VmPhase, list[Vm]] = {}
        for vm in self.vms:
            group = phases.get(vm.phase)
            if group is None:
                phases[vm.phase] = [vm]
            else:
                group.append(vm)
        self.phases = {phase: tuple(group) for phase, group in phases.items()}
        self.usable = tuple(vm for vm in self.vms if vm.phase is VmPhase.IDLE or vm.phase is VmPhase.BUSY)
        busy = self.phases.get(VmPhase.BUSY, ())
        self.busy = (tuple(vm.name for vm in busy), tuple(vm.job_id for vm in busy))


class VmIndex:
    """A snapshot's VMs by region and by (region, phase), snapshot order kept within each group; the
    groups are tuples, so no caller can change what the next pass reads. Get one from
    :func:`vm_index`, which builds it once per tuple of VMs."""

    def __init__(self, vms: tuple[Vm, ...] | list[Vm], grouped: "dict[str, RegionVms] | None" = None):
        """``grouped``: ``vms`` already grouped by region (``RegionVms``, in the order of ``vms``)."""
        if grouped is None:
            by_region: dict[str, list[Vm]] = {}
            for vm in vms:
                group = by_region.get(vm.region)
                if group is None:
                    by_region[vm.region] = [vm]
                else:
                    group.append(vm)
            grouped = {region: RegionVms(group) for region, group in by_region.items()}
        self._grouped = grouped
        self.by_region = {region: group.vms for region, group in grouped.items()}
        self.phases = {(region, phase): members for region, group in grouped.items()
                       for phase, members in group.phases.items()}

    def region(self, region: str) -> tuple[Vm, ...]:
        return self.by_region.get(region, ())

    def phase(self, region: str, phase: VmPhase) -> tuple[Vm, ...]:
        return self.phases.get((region, phase), ())

    def count(self, phase: VmPhase) -> int:
        return sum(len(group) for (_, p), group in self.phases.items() if p is phase)

    def names(self, region: str) -> tuple[str, ...]:
        group = self._grouped.get(region)
        return () if group is None else group.names

    def busy(self, region: str) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
        """The names of its BUSY VMs, in snapshot order, and the job each holds."""
        group = self._grouped.get(region)
        return ((), ()) if group is None else group.busy

    def usable(self, region: str) -> tuple[Vm, ...]:
        """Idle or busy, in snapshot order."""
        group = self._grouped.get(region)
        return () if group is None else group.usable

    @cached_property
    def alive(self) -> int:
        """VMs not being deleted."""
        return sum(len(group) for (_, phase), group in self.phases.items() if phase is not VmPhase.DELETING)

    @cached_property
    def latest_win(self) -> datetime | None:
        """When the last idle or busy VM entered its phase (became usable, or took a job)."""
        return max((vm.since for (_, phase), group in self.phases.items()
                    if phase is VmPhase.IDLE or phase is VmPhase.BUSY for vm in group), default=None)


_INDEXES: dict[int, tuple[tuple[Vm, ...], VmIndex]] = {}
_INDEXES_KEPT = 8  # a few clusters' latest tuples; production builds a new tuple each pass anyway


def remember_index(vms: tuple[Vm, ...], grouped: dict[str, RegionVms]) -> None:
    """Let :func:`vm_index` return ``VmIndex(vms, grouped)`` for ``vms``: the manager has grouped the
    VMs by region as it built them (and reuses unchanged regions' groups), so no pass groups them again."""
    if len(_INDEXES) >= _INDEXES_KEPT:
        _INDEXES.clear()
    _INDEXES[id(vms)] = (vms, VmIndex(vms, grouped))


def vm_index(vms: tuple[Vm, ...] | list[Vm]) -> VmIndex:
    """``VmIndex(vms)``, the same object again for the same tuple. ``ClusterManager`` hands over the
    very same ``vms`` tuple pass after pass while nothing about a cluster's instances changed (in the
    simulator, most passes of a long replay), and the planner, the baselines and ``Coverage`` all
    group it: once is enough. Nothing in an index depends on the time. A list is indexed anew (it
    may have changed since); the memo holds each tuple, so its id cannot be reused meanwhile."""
    if type(vms) is not tuple:
        return VmIndex(vms)
    hit = _INDEXES.get(id(vms))
    if hit is not None and hit[0] is vms:
        return hit[1]
    if len(_INDEXES) >= _INDEXES_KEPT:
        _INDEXES.clear()
    index = VmIndex(vms)
    _INDEXES[id(vms)] = (vms, index)
    return index


class Policy(Protocol):
    name: str

    def plan(self, snapshot: ClusterSnapshot) -> Plan: ...


def ski_rental_keep_s(vm_name: str, price_s: float, cap_s: float) -> float:
    """Randomized ski rental: with ``price_s`` the price of a cold start (in VM-seconds), keep an idle
    VM for price ln(1 + u(e - 1)), u uniform in [0, 1) and fixed per VM (a hash of its name, so the
    plan stays a pure function). Expected cost e/(e-1) ~ 1.58x the better choice in hindsight,
    against 2x for the fixed keep of ``price_s``; never more than ``cap_s``."""
    u = zlib.crc32(vm_name.encode()) / 2**32
    return min(price_s * math.log1p(u * (math.e - 1)), cap_s)
