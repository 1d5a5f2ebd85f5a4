"""Scenario files for the local Compute stand-in: format, parsing and validation (pure).

A scenario (YAML) sets the stand-in's MIGs and zones, capacity over time (schedules or trace
replay), boot and deletion timings, faults (quota, rate limits, regional outages, preemptions), the
time scale and each VM's startup command. A file that breaks the rules raises :class:`ScenarioError`
as ``scenario.yaml line 12: reason``.
Format: docs/reference/simulator.md#the-compute-stand-ins-scenario-file
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator,
)

from zen.core.provisioning import check_model
from zen_dev.capacity.traces import UNLIMITED, TraceError, load_trace
from zen_dev.capacity.yamllines import LineMap, ScenarioError, problems_from_validation

RATE_LIMITABLE_METHODS = (
    "get", "list", "aggregatedList", "resize", "deleteInstances", "listManagedInstances",
    "listErrors", "operations.get", "operations.wait", "operations.list",
)


def _capacity_value(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() == "unlimited":
        return UNLIMITED
    return value


Capacity = Annotated[int, BeforeValidator(_capacity_value), Field(ge=0)]
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,56}[a-z0-9])?\Z")


def _check_name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"{value!r} is not a valid name: lowercase letters, digits and '-', starting with a letter, at most 58 characters")
    return value


Name = Annotated[str, AfterValidator(_check_name)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # .inf/.nan: refused, named


class MigSpec(_Spec):
    name: Name
    region: str
    zones: list[str] | None = Field(default=None, min_length=1)
    machine_type: str
    cluster: str | None = None
    target_size: int = Field(default=0, ge=0, le=1000)


class _Keyed(_Spec):
    """A capacity series' key: a zone's capacity for a machine type (None: any) and, optionally, for one
    provisioning model only (``model``; zen.core.provisioning). Without ``model`` every model draws on it."""

    machine_type: str | None = None
    model: str | None = None

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str | None) -> str | None:
        return value if value is None else check_model(value, "model")

    @property
    def capacity_key(self) -> str | None:
        """The machine-type key of its series: ``<machine type>@<model>`` for one model's own capacity."""
        return self.machine_type if self.model is None else f"{self.machine_type or ''}@{self.model}"


class StepSpec(_Keyed):
    at_s: float = Field(ge=0)
    zone: str
    capacity: Capacity


class TraceSpec(_Keyed):
    file: str
    zone: str | None = None
    scale: float = Field(default=1.0, gt=0)
    offset_s: float = Field(default=0.0, ge=0)
    loop: bool = False


class CapacitySpec(_Spec):
    default: Capacity = UNLIMITED
    schedule: list[StepSpec] = []
    traces: list[TraceSpec] = []


class FixedBoot(_Spec):
    dist: Literal["fixed"]
    s: float = Field(ge=0)


class LognormalBoot(_Spec):
    dist: Literal["lognormal"]
    median_s: float = Field(gt=0)
    sigma: float = Field(default=0.3, ge=0)


class UniformBoot(_Spec):
    dist: Literal["uniform"]
    low_s: float = Field(ge=0)
    high_s: float = Field(ge=0)

    @model_validator(mode="after")
    def _order(self) -> "UniformBoot":
        if self.low_s > self.high_s:
            raise ValueError("low_s must be <= high_s")
        return self


BootSpec = Annotated[Union[FixedBoot, LognormalBoot, UniformBoot], Field(discriminator="dist")]


class TimingsSpec(_Spec):
    boot: BootSpec = LognormalBoot(dist="lognormal", median_s=90, sigma=0.3)
    retry_interval_s: float = Field(default=30, gt=0)
    delete_s: float = Field(default=30, ge=0)
    preempt_stop_s: float = Field(default=30, ge=0)


class WindowSpec(_Spec):
    from_s: float = Field(default=0, ge=0)
    to_s: float | None = None

    @model_validator(mode="after")
    def _order(self) -> "WindowSpec":
        if self.to_s is not None and self.to_s < self.from_s:
            raise ValueError("to_s must be >= from_s")
        return self

    def contains(self, t: float) -> bool:
        return self.from_s <= t and (self.to_s is None or t < self.to_s)


class QuotaSpec(WindowSpec):
    region: str
    machine_type: str | None = None
    limit: int = Field(ge=0)
    metric: str = "GPUS_ALL_REGIONS"


class RateLimitSpec(_Spec):
    fraction: float = Field(default=0.0, ge=0, le=1)
    windows: list[WindowSpec] = []
    methods: list[Literal[RATE_LIMITABLE_METHODS]] | None = None  # type: ignore[valid-type]


class OutageSpec(WindowSpec):
    region: str | None = None  # None: every region (and the calls that name none)
    methods: list[Literal[RATE_LIMITABLE_METHODS]] | None = None  # type: ignore[valid-type]


class PreemptAtSpec(_Spec):
    at_s: float = Field(ge=0)
    mig: str | None = None
    zone: str | None = None
    instance: str | None = None
    count: int = Field(default=1, ge=1)


class PreemptionSpec(_Spec):
    at: list[PreemptAtSpec] = []
    rate_per_hour: float = Field(default=0.0, ge=0)
    recreate: bool = True
    when_capacity_drops: bool = False


class FaultsSpec(_Spec):
    quota: list[QuotaSpec] = []
    rate_limit: RateLimitSpec = RateLimitSpec()
    unavailable: list[OutageSpec] = []
    preemptions: PreemptionSpec = PreemptionSpec()


class GpuQuotasSpec(_Spec):
    """The project's GPU quotas, counted in GPUs as Compute counts them (``zen.core.quotas``): reported by
    regions.get and projects.get, and enforced on each VM's creation (QUOTA_EXCEEDED). ``regions``: region
    -> metric (NVIDIA_L4_GPUS, PREEMPTIBLE_NVIDIA_L4_GPUS, ...) -> limit; a metric of a MIG's GPUs not listed
    there has ``default``; ``all_regions``: GPUS_ALL_REGIONS."""

    default: int = Field(default=1000, ge=0)
    all_regions: int = Field(default=1000, ge=0)
    regions: dict[str, dict[str, Annotated[int, Field(ge=0)]]] = {}


class StartupSpec(_Spec):
    command: list[str] | None = Field(default=None, min_length=1)
    env: dict[str, str] = {}
    log_dir: str | None = None
    stop_grace_s: float = Field(default=5.0, ge=0)


class ApiSpec(_Spec):
    operation_delay_s: float = Field(default=0.0, ge=0)
    writes_land_when_done: bool = False  # a resize's or delete's effect waits for its operation to be DONE
    max_errors_per_mig: int = Field(default=1000, ge=1)


class Scenario(_Spec):
    """A validated scenario. Build it with :func:`load_scenario` or :func:`parse_scenario`."""

    project: str | None = None
    seed: int = 0
    time_scale: float = Field(default=1.0, gt=0)
    start_time: datetime | None = None
    migs: list[MigSpec] = []
    zones: dict[str, list[str]] = {}
    capacity: CapacitySpec = CapacitySpec()
    timings: TimingsSpec = TimingsSpec()
    faults: FaultsSpec = FaultsSpec()
    gpu_quotas: GpuQuotasSpec = GpuQuotasSpec()
    startup: StartupSpec = StartupSpec()
    api: ApiSpec = ApiSpec()

    _source: str = PrivateAttr(default="scenario")
    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _lines: LineMap = PrivateAttr(default_factory=lambda: LineMap(None))

    @property
    def source(self) -> str:
        return self._source

    @property
    def base_dir(self) -> Path:
        return self._base_dir

    def resolve_path(self, path: str) -> Path:
        p = Path(os.path.expanduser(path))
        return p if p.is_absolute() else self._base_dir / p

    def error(self, problems: list[tuple[tuple, str]]) -> ScenarioError:
        """A :class:`ScenarioError` for problems found after parsing, given by location."""
        return ScenarioError(self._source, [(self._lines.line(loc), msg) for loc, msg in problems])


def parse_scenario(text: str, source: str = "scenario", base_dir: str | os.PathLike | None = None) -> Scenario:
    """Parse and validate YAML text; ``source`` names it in error messages."""
    try:
        lines = LineMap.from_text(text)
        raw = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ScenarioError(source, [(line, f"invalid YAML: {exc.problem or exc}")]) from None
    except yaml.YAMLError as exc:
        raise ScenarioError(source, [(None, f"invalid YAML: {exc}")]) from None
    if lines.duplicates:
        raise ScenarioError(source, lines.duplicates)
    return scenario_from_dict({} if raw is None else raw, source=source, base_dir=base_dir, lines=lines)


def load_scenario(path: str | os.PathLike) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(str(path), [(None, f"cannot read the scenario: {exc.strerror or exc}")]) from None
    return parse_scenario(text, source=path.name, base_dir=path.resolve().parent)


def scenario_from_dict(
    raw: Any, *, source: str = "scenario", base_dir: str | os.PathLike | None = None, lines: LineMap | None = None
) -> Scenario:
    lines = lines or LineMap(None)
    if not isinstance(raw, dict):
        raise ScenarioError(source, [(lines.line(()), "a scenario is a YAML mapping (key: value)")])
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError(source, problems_from_validation(exc.errors(), lines)) from None
    scenario._source = source
    scenario._base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
    scenario._lines = lines
    problems = _cross_checks(scenario)
    if problems:
        raise scenario.error(problems)
    return scenario


def _zone_in_region(zone: str, region: str) -> bool:
    return zone.startswith(region + "-") and len(zone) > len(region) + 1


def _cross_checks(s: Scenario) -> list[tuple[tuple, str]]:
    """Rules that involve several fields; each problem is (location, sentence)."""
    problems: list[tuple[tuple, str]] = []
    seen: dict[tuple[str, str], int] = {}
    for i, mig in enumerate(s.migs):
        key = (mig.region, mig.name)
        if key in seen:
            problems.append((("migs", i, "name"), f"MIG {mig.name} in {mig.region} is listed twice (also migs[{seen[key]}])"))
        seen.setdefault(key, i)
        for j, zone in enumerate(mig.zones or []):
            if not _zone_in_region(zone, mig.region):
                problems.append((("migs", i, "zones", j), f"zone {zone} is not in region {mig.region}"))
        if mig.zones and len(set(mig.zones)) != len(mig.zones):
            problems.append((("migs", i, "zones"), "a zone is listed twice"))
    for region, zones in s.zones.items():
        for j, zone in enumerate(zones):
            if not _zone_in_region(zone, region):
                problems.append((("zones", region, j), f"zone {zone} is not in region {region}"))
    step_keys: dict[tuple[str, str | None], set[float]] = {}
    for i, step in enumerate(s.capacity.schedule):
        times = step_keys.setdefault((step.zone, step.machine_type), set())
        if step.at_s in times:
            what = f"{step.zone}/{step.machine_type or '*'}"
            problems.append((("capacity", "schedule", i, "at_s"), f"two capacity steps for {what} at {step.at_s:g} s"))
        times.add(step.at_s)
    trace_keys: set[tuple[str, str | None]] = set()
    for i, trace in enumerate(s.capacity.traces):
        try:
            loaded = load_trace(s.resolve_path(trace.file))
        except TraceError as exc:
            problems.append((("capacity", "traces", i, "file"), str(exc)))
            continue
        zone = trace.zone or loaded.zone
        if zone is None:
            problems.append((("capacity", "traces", i), "zone is required (the file name does not start with a zone)"))
            continue
        key = (zone, trace.machine_type)
        what = f"{zone}/{trace.machine_type or '*'}"
        if key in step_keys:
            problems.append((("capacity", "traces", i), f"capacity for {what} is both scripted and replayed"))
        elif key in trace_keys:
            problems.append((("capacity", "traces", i), f"two traces feed {what}"))
        trace_keys.add(key)
    return problems

