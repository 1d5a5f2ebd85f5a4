"""Turn a validated scenario (and optionally a Zen config) into the stand-in's inputs.

- :func:`migs_from_zen_config` gives one regional MIG per pool of each cluster (region x provisioning
  model: ``ClusterConfig.mig_name``), in zones ``<region>-a, -b, -c`` unless told otherwise.
- :func:`resolve_migs` merges those with the scenario's own ``migs`` (the scenario wins on the
  same name and region) and checks that scripted preemptions name existing MIGs and zones.
- :func:`build_capacity` builds the :class:`CapacitySchedule` (reading trace files).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from zen.core.config import ZenConfig
from zen_dev.capacity.scenario import Scenario
from zen_dev.capacity.traces import CapacitySchedule, load_trace

DEFAULT_ZONE_SUFFIXES = ("a", "b", "c")


@dataclass(frozen=True)
class MigDef:
    """One regional managed instance group the stand-in serves."""

    name: str
    region: str
    zones: tuple[str, ...]
    machine_type: str
    cluster: str | None = None
    target_size: int = 0
    # Its template's provisioning model (zen.core.provisioning): spot VMs are preempted, standard and
    # flex-start ones never; flex-start MIGs grow by resize requests. None: a MIG named by a scenario file,
    # or of a cluster that lists no provisioning: preemptible, as every MIG of the stand-in was before models.
    model: str | None = None
    # Its VMs' GPUs (from the cluster), which the GPU quotas count; none for a MIG named by a scenario file.
    gpu_type: str | None = None
    gpu_count: int = 0
    # Target shape ANY_SINGLE_ZONE (a compact cluster's MIG, terraform's compute.tf): its VMs all in one zone,
    # the one its VMs hold, or, with none, the zone with the most room.
    single_zone: bool = False


def default_zones(region: str) -> tuple[str, ...]:
    return tuple(f"{region}-{suffix}" for suffix in DEFAULT_ZONE_SUFFIXES)


def migs_from_zen_config(
    config: ZenConfig, zones: Mapping[str, Sequence[str]] | None = None
) -> list[MigDef]:
    """One MIG per pool of every cluster of ``config`` (its regions x its provisioning models, named by
    ``ClusterConfig.mig_name``), at size 0. A cluster that lists no provisioning keeps the stand-in's
    preemptible MIGs (``MigDef.model`` None)."""
    zones = zones or {}
    return [
        MigDef(
            name=cluster.mig_name(region, model),
            region=region,
            zones=tuple(zones.get(region) or default_zones(region)),
            machine_type=cluster.machine_type,
            cluster=cluster.name,
            model=model if "provisioning" in cluster.model_fields_set else None,
            gpu_type=cluster.gpu_type,
            gpu_count=cluster.gpu_count,
            single_zone=cluster.compact,
        )
        for cluster in config.clusters
        for region in cluster.regions
        for model in cluster.provisioning
    ]


def project_of(scenario: Scenario, config: ZenConfig | None) -> str:
    if scenario.project:
        return scenario.project
    return config.project if config is not None else "zen-local"


def resolve_migs(scenario: Scenario, config: ZenConfig | None = None) -> list[MigDef]:
    """The MIGs to serve: from ``config`` (if any), then the scenario's list on top."""
    by_key: dict[tuple[str, str], MigDef] = {}
    if config is not None:
        for mig in migs_from_zen_config(config, scenario.zones):
            by_key[(mig.region, mig.name)] = mig
    for spec in scenario.migs:
        by_key[(spec.region, spec.name)] = MigDef(
            name=spec.name,
            region=spec.region,
            zones=tuple(spec.zones or scenario.zones.get(spec.region) or default_zones(spec.region)),
            machine_type=spec.machine_type,
            cluster=spec.cluster,
            target_size=spec.target_size,
        )
    migs = list(by_key.values())
    if not migs:
        raise scenario.error([(("migs",), "no MIGs: list them under 'migs' or pass a Zen config (--config)")])
    _check_preemption_targets(scenario, migs)
    return migs


def _check_preemption_targets(scenario: Scenario, migs: list[MigDef]) -> None:
    names = {m.name for m in migs}
    zones = {z for m in migs for z in m.zones}
    problems = []
    for i, event in enumerate(scenario.faults.preemptions.at):
        if event.mig is not None and event.mig not in names:
            problems.append((("faults", "preemptions", "at", i, "mig"), f"no MIG named {event.mig}"))
        if event.zone is not None and event.zone not in zones:
            problems.append((("faults", "preemptions", "at", i, "zone"), f"no MIG uses zone {event.zone}"))
    if problems:
        raise scenario.error(problems)


def build_capacity(scenario: Scenario) -> CapacitySchedule:
    """The capacity schedule the scenario describes; trace files are read here."""
    spec = scenario.capacity
    schedule = CapacitySchedule(default=spec.default)
    steps: dict[tuple[str, str | None], list[tuple[float, int]]] = {}
    for step in spec.schedule:
        steps.setdefault((step.zone, step.capacity_key), []).append((step.at_s, step.capacity))
    for (zone, machine_type), items in steps.items():
        schedule.add_steps(zone, machine_type, items)
    for trace_spec in spec.traces:
        trace = load_trace(scenario.resolve_path(trace_spec.file))
        zone = trace_spec.zone or trace.zone
        assert zone is not None, "validated by the scenario parser"
        schedule.add_trace(
            zone, trace_spec.capacity_key, trace,
            scale=trace_spec.scale, offset_s=trace_spec.offset_s, loop=trace_spec.loop,
        )
    return schedule
