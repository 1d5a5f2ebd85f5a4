"""Scenario files for the local Compute stand-in: format, parsing and validation (pure).

A scenario is a YAML mapping. Every key is optional; times and delays are **cloud seconds**
since the stand-in started (``time_scale`` relates them to real time). Example::

    project: zen-local            # default: the Zen config's project, else "zen-local"
    seed: 7                       # seeds names, boot delays, preemptions, rate limiting
    time_scale: 60                # cloud seconds per real second (60: a real second is a minute)
    start_time: 2025-01-01T00:00:00Z   # wall clock of cloud t=0 for timestamps (default: now)

    migs:                         # regional MIGs; with --config, zen-<cluster>-<region> for
      - name: zen-4xa100-40gb-us-central1   # every cluster x region are added (same name: the
        region: us-central1                 # entry here wins)
        zones: [us-central1-a, us-central1-b, us-central1-c]   # default: <region>-a, -b, -c
        machine_type: a2-highgpu-4g
        cluster: 4xa100-40gb      # optional: the VM's ZEN_CLUSTER (with ZEN_VM_PROOF=required, Zen takes
                                  # the word of its VMs only if the MIG is named zen-<cluster>-<region>)
        target_size: 0            # size at start
    zones:                        # zones of config-derived MIGs, per region (default a, b, c)
      europe-west4: [europe-west4-a, europe-west4-b]

    capacity:                     # how many VMs of a machine type fit in a zone, over time
      default: unlimited          # for zones/machine types not listed: an int or "unlimited"
      schedule:                   # steps; before a key's first step the default applies
        - {at_s: 0, zone: us-central1-a, machine_type: a2-highgpu-4g, capacity: 0}
        - {at_s: 600, zone: us-central1-a, machine_type: a2-highgpu-4g, capacity: 4}
        - {at_s: 0, zone: us-central1-b, capacity: 0}     # no machine_type: every machine type
      traces:                     # replay files in the shared/traces/gcp-a100-availability format
        - file: ../shared/traces/gcp-a100-availability/us-west1-b_a100_40gb_8.json
          zone: us-west1-b        # target zone; default: the zone in the file name
          machine_type: a2-highgpu-8g   # default: every machine type in that zone
          scale: 1                # capacity = floor(value * scale)
          offset_s: 0             # cloud t reads the trace at t + offset_s
          loop: false             # after the end: repeat (true) or keep the last value

    timings:
      boot: {dist: lognormal, median_s: 90, sigma: 0.3}  # or {dist: fixed, s: 60}
                                  # or {dist: uniform, low_s: 60, high_s: 120}
      retry_interval_s: 30        # a creation that failed (stockout, quota) is retried this often
      delete_s: 30                # a deleted VM shows DELETING this long, then is gone
      preempt_stop_s: 30          # a preempted VM shows STOPPING this long

    faults:
      quota:                      # QUOTA_EXCEEDED once a region holds `limit` VMs of that type
        - {region: us-west1, machine_type: a2-highgpu-8g, limit: 0, from_s: 0, to_s: 3600,
           metric: NVIDIA_A100_GPUS}
      rate_limit:                 # API calls answered 403 rateLimitExceeded
        fraction: 0.1             # of all calls, drawn from the seeded RNG
        windows: [{from_s: 300, to_s: 360}]   # every call inside a window
        methods: [resize]         # optional: only these methods (default: all)
      unavailable:                # API calls answered 503 backendError (a region's Compute down)
        - {region: europe-west4, from_s: 0, to_s: 600, methods: [get, list]}
                                  # region, to_s, methods optional (default: every region, for
                                  # ever, every method); inside a window every such call fails
      preemptions:
        at: [{at_s: 900, mig: zen-4xa100-40gb-us-central1, zone: null, instance: null, count: 1}]
        rate_per_hour: 0.0        # per running VM (exponential lifetimes)
        recreate: true            # true: the MIG recreates the VM (GCE's behaviour for
                                  # preempted MIG instances); false: it is removed, targetSize -1
        when_capacity_drops: false   # true: VMs above a zone's new capacity are preempted;
                                     # false: running VMs keep running

    startup:                      # run when a VM finishes booting (argv list, no shell)
      command: [python, -m, zen.agent]
      env: {EXTRA: "1"}           # added to the parent env with ZEN_VM_NAME, ZEN_CLUSTER,
                                  # ZEN_REGION, ZEN_ZONE, ZEN_PROJECT, ZEN_MIG
      log_dir: .zen/compute-vms   # one <vm>.log per VM (stdout and stderr)
      stop_grace_s: 5             # REAL seconds between SIGTERM and SIGKILL

    api:
      operation_delay_s: 0        # operations are RUNNING this long, then DONE
      max_errors_per_mig: 1000    # listErrors keeps the newest this many

Relative paths (trace files, log_dir) are resolved against the scenario file's directory.
A file that breaks these rules is rejected with :class:`ScenarioError`, whose message reads
``scenario.yaml line 12: capacity must be >= 0``.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

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
    model_config = ConfigDict(extra="forbid", frozen=True)


class MigSpec(_Spec):
    name: Name
    region: str
    zones: list[str] | None = Field(default=None, min_length=1)
    machine_type: str
    cluster: str | None = None
    target_size: int = Field(default=0, ge=0, le=1000)


class StepSpec(_Spec):
    at_s: float = Field(ge=0)
    zone: str
    machine_type: str | None = None
    capacity: Capacity


class TraceSpec(_Spec):
    file: str
    zone: str | None = None
    machine_type: str | None = None
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


class StartupSpec(_Spec):
    command: list[str] | None = Field(default=None, min_length=1)
    env: dict[str, str] = {}
    log_dir: str | None = None
    stop_grace_s: float = Field(default=5.0, ge=0)


class ApiSpec(_Spec):
    operation_delay_s: float = Field(default=0.0, ge=0)
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

