"""Simulator scenario files: format, validation, and the built-in scenarios (``scenarios/``).

A scenario (YAML) describes the cloud a policy is tested against: clusters, zones, capacity
(``zen_dev.capacity``), boots, billing, prices per region and provisioning model, preemptions, the tick,
the default job trace and routing by data. Trace files that are absent raise :class:`TraceUnavailable` (callers skip the scenario); any
other problem raises ``ScenarioError`` as ``FILE line N: reason``.
Format: docs/reference/simulator.md#the-simulators-scenario-file
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from zen.core.cluster_config import Number, check_models
from zen.core.config import ClusterConfig, DataConfig, Deadlines, Limits, QueueConfig, Queueing
from zen.core.provisioning import MODELS, pool_key
from zen.scaling.model import ClusterLimits, Pool, Timing
from zen_dev.capacity.scenario import BootSpec, CapacitySpec, LognormalBoot
from zen_dev.capacity.traces import CapacitySchedule, TraceError, load_trace
from zen_dev.capacity.yamllines import LineMap, ScenarioError, problems_from_validation
from zen_dev.sim.jobspec import SyntheticJobs, references
from zen_dev.sim.jobspec import validate as validate_jobs
from zen_dev.sim.timing import timing_problem
from zen_dev.sim.written import drawable, scenario_numbers, zones_listed

MAX_PRICE = 1e6  # USD per VM-hour: above any machine's, and a 30-day bill of it stays a finite float

SCENARIO_DIR = Path(__file__).with_name("scenarios")
REPO_ROOT = Path(__file__).resolve().parents[3]


def traces_dir() -> Path:
    """Where the shared traces live: ``$ZEN_TRACES_DIR``, else ``<repo>/../shared/traces``."""
    return Path(os.environ.get("ZEN_TRACES_DIR") or REPO_ROOT.parent / "shared" / "traces")


class TraceUnavailable(ScenarioError):
    """A trace file the scenario needs is absent: skip the scenario rather than fail."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # .inf/.nan: refused, named


class ClusterSpec(ClusterConfig):
    """A cluster as in ``zen.core.config`` (same names and limits); the GPU type may be left out. The
    simulated world runs one job per VM: ``max_jobs_per_vm`` stays 1. ``provisioning``: the models it may
    use, first the one its VMs run as (default: see ``ScenarioSpec.models_of``)."""

    _MIG_NAME_MAX: ClassVar[int] = 58  # GCE's (a VM's name "<MIG>-xxxx"): no terraform names anything after it here
    gpu_type: str = "nvidia-tesla-a100"
    provisioning: list[str] | None = None
    # Its own price table (as the scenario's ``prices:``), for a scenario whose clusters differ in shape.
    prices: dict[str, dict[str, Number[float]]] | None = None  # yes (YAML's true) is no price

    @field_validator("provisioning")
    @classmethod
    def _known_models(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("provisioning lists at least one model (or leave it out)")
        return check_models(value)

    @field_validator("max_jobs_per_vm")
    @classmethod
    def _one_job_per_vm(cls, value: int) -> int:
        if value != 1:
            raise ValueError("the simulator runs one job per VM: leave max_jobs_per_vm at 1")
        return value


class PreemptionSpec(_Spec):
    rate_per_hour: float = Field(default=0.0, ge=0, le=3600)  # beyond once a second, no VM boots (and the run hung)
    # GCE gives a preempted spot VM 30 s to shut down, billed until it has stopped (a deleted VM is billed
    # through its delete_s alike); 0: the bill ends at the preemption (as it did, spot looking cheaper).
    stop_s: float = Field(default=30.0, ge=0)


class RoutingSpec(_Spec):
    """Zen's start routing by data (``zen.core.routing``), with the configuration's defaults: a job whose input
    weighs ``route_min_gb`` is offered first to its data's region, widened at the first tick after
    ``data_wait_s`` (0: never narrowed). Only for policies with ``routes_by_data`` (zen)."""

    data_wait_s: float = Field(default=Deadlines().data_wait_s, ge=0)
    route_min_gb: float = Field(default=DataConfig().route_min_gb, ge=0)
    # Warm caches (zen.agent.cache), every policy's VMs: each keeps this many GB of datasets (LRU; 0:
    # none); a hit reads nothing and saves its staging time at staging_mb_s (measured, not simulated:
    # a job runs its trace duration either way). Zen also offers a job first to an idle VM holding it.
    cache_gb: float = Field(default=0, ge=0)
    staging_mb_s: float = Field(default=200, gt=0)


class FlexStartSpec(_Spec):
    """Flex-start pools' resize requests: queued for a delay drawn from ``grant``, then granted all at once
    when the zones hold them all (zen_dev.sim.flexstart)."""

    grant: BootSpec = LognormalBoot(dist="lognormal", median_s=900, sigma=0.7)

    _finite_draws = field_validator("grant")(drawable)


class ScenarioSpec(_Spec):
    description: str = ""
    seed: int = 0
    start_time: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc)
    horizon_s: float | None = Field(default=None, gt=0)
    drain_s: float = Field(default=3600, ge=0)
    tick_s: float = Field(default=60, gt=0)
    clusters: list[ClusterSpec] = Field(min_length=1)
    zones: dict[str, list[str]] = {}
    capacity: CapacitySpec = CapacitySpec()
    boot: BootSpec = LognormalBoot(dist="lognormal", median_s=90, sigma=0.3)
    # A GPU VM is PROVISIONING/STAGING for ~20-30 s of a ~90 s boot before RUNNING (then the OS, the
    # driver and the agent): a quarter, unbilled. 0 bills the whole boot (the simulator before).
    unbilled_boot_fraction: float = Field(default=0.25, ge=0, lt=1)
    # Drawn apart instead (``boot`` then is the provisioning, until RUNNING): the guest's boot to its agent.
    guest_boot: BootSpec | None = None
    retry_interval_s: float = Field(default=30, ge=1)  # every failure is kept: 1e-6 s filled the memory
    list_errors_delay_s: float = Field(default=20, ge=0)
    preempt_on_capacity_drop: bool = True
    pass_on_vm_heartbeat: bool = True  # production runs a pass when a VM becomes usable (Zen.on_heartbeat)
    pass_on_vm_running: bool = True  # and, for policies that hear it, at a racing VM's first word
    # The guest's first word (its startup script, before the agent: zen.core.vm_heartbeat.VmUp), this
    # long after RUNNING (the kernel and init; never later than the guest's boot to its agent).
    first_word_s: float = Field(default=20, ge=0)
    delete_s: float = Field(default=30, ge=0)
    preemption: PreemptionSpec = PreemptionSpec()
    flex_start: FlexStartSpec = FlexStartSpec()
    timing: dict[str, float] = {}
    jobs: dict[str, Any] | None = None
    queues: list[QueueConfig] = []  # as in zen.core.config: admission by quota (zen_dev.sim.queues); none: all admitted
    queueing: Queueing = Queueing()
    # As in zen.core.config: limits.max_runtime_s caps a job's own max_runtime_s and is its value when it gives none;
    # each attempt is stopped there (the job FAILED). Seconds of the simulated world (a trace's compression aside).
    limits: Limits = Limits()
    routing: RoutingSpec = RoutingSpec()
    # USD per VM-hour of the clusters' shape: region -> model -> price. None: the run counts no dollars.
    prices: dict[str, dict[str, Number[float]]] | None = None  # yes (YAML's true) is no price

    _finite_draws = field_validator("boot", "guest_boot")(drawable)
    _zones = field_validator("zones")(zones_listed)

    @property
    def spot_vms(self) -> bool:
        """Whether the scenario's VMs behave as spot VMs (GCE takes them back)."""
        return self.preempt_on_capacity_drop or self.preemption.rate_per_hour > 0

    def prices_of(self, cluster: ClusterSpec) -> dict[str, dict[str, float]] | None:
        """The price table of a cluster's shape: its own, else the scenario's (None: no prices)."""
        return cluster.prices if cluster.prices is not None else self.prices

    @property
    def priced(self) -> bool:
        return self.prices is not None or any(c.prices is not None for c in self.clusters)

    def models_of(self, cluster: ClusterSpec) -> tuple[str, ...]:
        """The models a cluster may use, the one its VMs run as first: its ``provisioning``, else spot when
        the scenario's VMs are spot and spot is priced in any of its regions (or nothing is: a region without it is
        then refused, naming the line), else the first model priced in its first region, else standard. (Spot
        looked for in the first region alone, a table without it there ran every policy on standard VMs.)"""
        if cluster.provisioning:
            return tuple(cluster.provisioning)
        table = self.prices_of(cluster)
        priced = list((table or {}).get(cluster.regions[0], {}))
        if self.spot_vms and (table is None or any("spot" in table.get(r, {}) for r in cluster.regions)):
            return ("spot",)
        return (priced[0],) if priced else ("standard",)

    @model_validator(mode="after")
    def _checks(self) -> "ScenarioSpec":
        names = [c.name for c in self.clusters]
        if len(set(names)) != len(names):
            raise ValueError("cluster names must be unique")
        if self.start_time.tzinfo is None:
            raise ValueError("start_time needs a timezone (e.g. 2026-01-01T00:00:00Z)")
        if (problem := timing_problem(self.timing)) is not None:
            raise ValueError(problem)
        for queue in self.queues:
            unknown_clusters = sorted(set(queue.quota) - set(names))
            if unknown_clusters:
                raise ValueError(f"queue {queue.name}: quota names unknown clusters: {', '.join(unknown_clusters)}")
        if self.priced:
            self._check_prices()
        return self

    def _check_prices(self) -> None:
        tables = [("prices", self.prices)] + [(f"cluster {c.name}: prices", c.prices) for c in self.clusters]
        for field, table in tables:
            for region, by_model in (table or {}).items():
                for model, price in by_model.items():
                    if model not in MODELS:
                        raise ValueError(f"{field}.{region}: unknown model {model!r}; known: {', '.join(MODELS)}")
                    if not math.isfinite(price) or not 0 <= price <= MAX_PRICE:  # a bill of a finite price stays finite
                        raise ValueError(f"{field}.{region}.{model}: a price is USD per VM-hour, 0 to {MAX_PRICE:,.0f} "
                                         f"(got {price})")
        shared = {(c.machine_type, c.gpu_count): c.name for c in self.clusters if c.prices is None}
        if self.prices is not None and len(shared) > 1:  # one VM-hour price for VMs of different sizes
            shapes = ", ".join(f"{name}: {machine}, {gpus} GPUs" for (machine, gpus), name in shared.items())
            raise ValueError(f"prices: one table is USD per VM-hour of one shape, and clusters of different shapes "
                             f"would share it ({shapes}): give each cluster its own prices:")
        for index, cluster in enumerate(self.clusters):
            table = self.prices_of(cluster)
            field = "prices" if cluster.prices is None else f"cluster {cluster.name}: prices"
            if table is None:  # the path first: its line is named (yamllines.problems_from_validation)
                raise ValueError(f"clusters.{index}: cluster {cluster.name} has no prices while others do: give it "
                                 "prices (or a top-level prices: table)")
            for region in cluster.regions:
                if region not in table:
                    raise ValueError(f"{field}: no price for region {region} (cluster {cluster.name})")
                models = self.models_of(cluster)
                missing = [m for m in models if m not in table[region]]
                if missing and cluster.provisioning and len(missing) == len(models):
                    raise ValueError(f"{field}.{region}: none of the models cluster {cluster.name}'s provisioning "
                                     f"lists ({', '.join(models)}) is priced here: the cluster could run no VM there")
                if missing and not cluster.provisioning:  # the model was chosen for it (models_of): say how, and how to choose
                    raise ValueError(
                        f"{field}.{region}: no {missing[0]} price; cluster {cluster.name} lists no provisioning:, so "
                        f"its VMs run as {missing[0]} (spot where the scenario's VMs are spot and spot is priced, else "
                        f"the model priced first in {cluster.regions[0]}): price it here, or give the cluster "
                        f"provisioning:")


@dataclass(frozen=True)
class SimCluster:
    """A cluster ready for the simulator: limits for snapshots (its regions), machine type, zones per
    region, the provisioning models it may use and their prices. Each policy's world has one MIG per
    pool (region x model) it uses: :meth:`pools`."""

    limits: ClusterLimits
    machine_type: str
    gpu_count: int
    zones: dict[str, tuple[str, ...]]
    models: tuple[str, ...] = ("spot",)  # the provisioning models it may use, the primary first
    table: dict[str, dict[str, float]] | None = None  # region -> model -> USD per VM-hour (None: no prices)
    floor_usd_per_vm_hour: float | None = None  # the cheapest listed price among its regions and models
    # Its jobs' default start bound where the cluster gives one (production's planner gets its cluster's); None:
    # the scenario's ``timing`` (the cluster field was accepted and dropped: every run saw 600 s).
    max_start_wait_s: float | None = None
    flex_min_wait_s: float = 300.0  # flex_start_min_wait_s and flex_start_run_s, as production's cluster has them
    flex_run_s: float = 7 * 86400.0  # (zen_dev.sim.jobs: jobs that accept flex-start alone are held to them)

    def pools(self, models: tuple[str, ...] | None = None) -> dict[str, Pool]:
        """Pool key -> pool for ``models`` (None: the cluster's), region by region in its order, each
        priced from its table. The cluster's primary model keys its pools by the bare region."""
        models = models or self.models
        primary = models[0]
        return {pool_key(r, m, primary): Pool(r, m, (self.table or {}).get(r, {}).get(m))
                for r in self.limits.regions for m in models}

    def sells(self, region: str, model: str) -> bool:
        """Whether ``model`` is sold in ``region``: its table lists a price for it there (or nothing is priced).
        A pool that is not sold has no capacity (``close_unsold``)."""
        return self.table is None or model in self.table.get(region, {})

    def priced_for(self, model: str) -> bool:
        """Whether a region of the cluster sells ``model`` (:meth:`sells`)."""
        return any(self.sells(r, model) for r in self.limits.regions)


@dataclass
class Scenario:
    """A validated scenario with its capacity schedule built (trace files read)."""

    name: str
    spec: ScenarioSpec
    clusters: list[SimCluster]
    capacity: CapacitySchedule
    base_dir: Path

    @property
    def timing(self) -> Timing:
        # Simulated agents never die and report only their changes (no VM heartbeats are simulated: an
        # agent's last_seen_at is its last change), so the liveness deadline is off unless a scenario sets it.
        return Timing(**{"agent_silence_s": math.inf, **self.spec.timing})

    def resolve(self, path: str) -> Path:
        return resolve_path(path, self.base_dir)

    def unsold(self) -> list[str]:
        """Each cluster's models its price table does not sell in a region (``close_unsold``): "c: spot in r2"."""
        return [f"{c.limits.name}: {model} in {region}" for c in self.clusters
                for region in c.limits.regions for model in c.models if not c.sells(region, model)]

    def unused_zones(self) -> list[str]:
        """Zones the capacity names that no cluster's MIGs run in (its region not a cluster's, or not among the
        zones the scenario lists for it): their capacity changes nothing."""
        used = {zone for cluster in self.clusters for zones in cluster.zones.values() for zone in zones}
        return sorted(self.capacity.zones() - used)


def resolve_path(path: str, base_dir: Path) -> Path:
    expanded = os.path.expanduser(path.replace("${traces}", str(traces_dir())))
    p = Path(expanded)
    return p if p.is_absolute() else base_dir / p


def builtin_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def load_scenario(name_or_path: str | os.PathLike) -> Scenario:
    """A built-in scenario by name (see :func:`builtin_names`) or a YAML file by path."""
    path = Path(name_or_path)
    if not path.suffix and (SCENARIO_DIR / f"{path.name}.yaml").exists():
        path = SCENARIO_DIR / f"{path.name}.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        hint = f" (built-in scenarios: {', '.join(builtin_names())})" if not path.suffix else ""
        raise ScenarioError(str(name_or_path), [(None, f"cannot read the scenario: {exc.strerror or exc}{hint}")]) from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(str(name_or_path), [(None, f"not UTF-8 text (byte {exc.start}): save it as UTF-8")]) from None
    return parse_scenario(text, source=path.name, base_dir=path.resolve().parent, name=path.stem)


def parse_scenario(text: str, source: str = "scenario", base_dir: Path | None = None, name: str | None = None) -> Scenario:
    """Validate YAML text and build the capacity schedule; errors name the line."""
    try:
        lines = LineMap.from_text(text)
        raw = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise ScenarioError(source, [(mark.line + 1 if mark else None, f"invalid YAML: {exc.problem or exc}")]) from None
    except yaml.YAMLError as exc:
        raise ScenarioError(source, [(None, f"invalid YAML: {exc}")]) from None
    if lines.duplicates:
        raise ScenarioError(source, lines.duplicates)
    if not isinstance(raw, dict):
        raise ScenarioError(source, [(None, "a scenario is a YAML mapping (key: value) with at least 'clusters'")])
    try:
        spec = ScenarioSpec.model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError(source, problems_from_validation(exc.errors(), lines)) from None
    jobs: Any = None
    if spec.jobs is not None:  # checked here, where its lines are known
        try:
            jobs = validate_jobs(spec.jobs)
        except ValidationError as exc:
            errors = [{**err, "loc": ("jobs", *err["loc"])} for err in exc.errors()]
            raise ScenarioError(source, problems_from_validation(errors, lines)) from None
    written = scenario_numbers(raw, spec, jobs)
    if isinstance(jobs, SyntheticJobs):  # what its jobs name that the clusters do not have
        written += references(jobs, {c.name: (tuple(c.regions), spec.models_of(c)) for c in spec.clusters})
    if written:  # a number written as yes or as text (pydantic read it as a number), a name the clusters lack
        raise ScenarioError(source, sorted(((lines.line(loc), why) for loc, why in written), key=lambda p: p[0] or 0))
    base_dir = base_dir or Path.cwd()
    capacity = _build_capacity(spec, source, base_dir, lines)
    clusters = [
        SimCluster(
            limits=ClusterLimits(c.name, tuple(c.regions), c.max_vms_per_region, c.max_vms, c.min_vms),
            machine_type=c.machine_type,
            gpu_count=c.gpu_count,
            zones={r: tuple(spec.zones.get(r) or default_zones(r, capacity.zones())) for r in c.regions},
            max_start_wait_s=c.max_start_wait_s if "max_start_wait_s" in c.model_fields_set else None,
            flex_min_wait_s=c.flex_start_min_wait_s, flex_run_s=c.flex_start_run_s,
            **_pricing(spec, c),
        )
        for c in spec.clusters
    ]
    if (spec.capacity.schedule or spec.capacity.traces) and not _applies(capacity, clusters):
        zones = sorted({z for c in clusters for zs in c.zones.values() for z in zs})
        raise ScenarioError(source, [(lines.line(("capacity",)), (
            "capacity: none of its steps or traces is for a zone and machine type a cluster runs, so every zone would "
            "have the default capacity: check their zone and machine_type (the clusters' zones: "
            f"{', '.join(zones)}; machine types: {', '.join(sorted({c.machine_type for c in clusters}))})"))])
    close_unsold(capacity, clusters)
    return Scenario(name or Path(source).stem, spec, clusters, capacity, base_dir)


def _applies(capacity: CapacitySchedule, clusters: list[SimCluster]) -> bool:
    """Whether some series of ``capacity`` is for a zone a cluster's MIGs run in and its machine type (or any: none
    named; a model's own, ``type@model`` or ``@model``, counts by its type)."""
    runs = {(zone, c.machine_type) for c in clusters for zones in c.zones.values() for zone in zones}
    zones = {zone for zone, _ in runs}
    machines = ((zone, (key or "").split("@")[0]) for zone, key in capacity.keys())
    return any((zone, machine) in runs if machine else zone in zones for zone, machine in machines)


def default_zones(region: str, named: set[str]) -> list[str]:
    """A region's zones where the scenario lists none: ``<region>-a``, ``-b``, ``-c`` and every zone of it the
    capacity names (a trace of us-east1-d, a zone GCE has, was read and never used: the MIG had no such zone)."""
    return sorted({f"{region}-a", f"{region}-b", f"{region}-c"} | {z for z in named if z.startswith(region + "-")})


def _pricing(spec: ScenarioSpec, cluster: ClusterSpec) -> dict[str, Any]:
    """A cluster's models, the price its VMs pay per region and the price floor (validated before: each region
    prices one of its models at least; one it does not price is not sold there, :func:`close_unsold`)."""
    models, table = spec.models_of(cluster), spec.prices_of(cluster)
    if table is None:
        return {"models": models}
    tables = [table[r] for r in cluster.regions]
    return {"models": models, "table": {r: dict(table[r]) for r in cluster.regions},
            "floor_usd_per_vm_hour": min(t[m] for t in tables for m in models if m in t)}


def unsold_key(cluster: str, model: str) -> str:
    """The capacity key of a cluster's pools of ``model`` in a region whose prices do not list it: always 0."""
    return f"unsold {cluster}/{model}"


def close_unsold(capacity: CapacitySchedule, clusters: list[SimCluster]) -> None:
    """A model a cluster's price table does not list in a region is not sold there: its pool there (every policy's
    world has one, as production's MIGs are per region and model) gets no capacity in any of the region's zones, so
    a VM asked there waits and fails as in a stockout, and none is ever billed at a price the table does not give.
    (Production ranks such a pool, unpriced, after every priced one: ``zen.scaling.ranking``.)"""
    for cluster in clusters:
        for region, zones in cluster.zones.items():
            for model in MODELS:  # a baseline's own model too (ask-every-region-standard's)
                if not cluster.sells(region, model):
                    for zone in zones:
                        capacity.add_steps(zone, unsold_key(cluster.limits.name, model), [(0.0, 0)])


def _build_capacity(spec: ScenarioSpec, source: str, base_dir: Path, lines: LineMap) -> CapacitySchedule:
    schedule = CapacitySchedule(default=spec.capacity.default)
    steps: dict[tuple[str, str | None], list[tuple[float, int]]] = {}
    for step in spec.capacity.schedule:
        steps.setdefault((step.zone, step.capacity_key), []).append((step.at_s, step.capacity))
    for (zone, machine_type), items in steps.items():
        try:
            schedule.add_steps(zone, machine_type, items)
        except ValueError as exc:  # which steps: the zone's and machine type's (two at one at_s, say)
            raise ScenarioError(source, [(lines.line(("capacity", "schedule")),
                                          f"capacity.schedule {zone}/{machine_type or '*'}: {exc}")]) from None
    for i, trace_spec in enumerate(spec.capacity.traces):
        where = lines.line(("capacity", "traces", i, "file"))
        path = resolve_path(trace_spec.file, base_dir)
        if not path.exists():
            raise TraceUnavailable(source, [(where, f"trace file {path} is absent")])
        try:
            trace = load_trace(path)
            zone = trace_spec.zone or trace.zone
            if zone is None:
                raise TraceError("zone is required (the file name does not start with a zone)")
            schedule.add_trace(zone, trace_spec.capacity_key, trace, scale=trace_spec.scale,
                               offset_s=trace_spec.offset_s, loop=trace_spec.loop)
        except (TraceError, ValueError) as exc:
            raise ScenarioError(source, [(where, str(exc))]) from None
    return schedule
