"""How ``zen_dev.sim.world.Simulation`` sets a policy up over a scenario: the cluster as the manager's
configuration, the provisioning models the policy's world has MIGs for, the capacity each model draws on,
and the policy as the manager calls it (each plan timed)."""

from __future__ import annotations

import time

from zen.core.config import ClusterConfig
from zen.core.provisioning import MODELS
from zen.scaling.model import ClusterSnapshot, Plan, Policy
from zen_dev.sim.policies import PolicyUnavailable
from zen_dev.sim.scenario import Scenario, SimCluster, unsold_key

_NO_LIMIT = 10**9


def cluster_config(spec: SimCluster, models: tuple[str, ...] | None = None, unlimited: bool = False) -> ClusterConfig:
    """The scenario's cluster as the manager's configuration, with the provisioning ``models`` the
    policy uses (None: the cluster's; no limits for ``ignores_capacity``)."""
    limits = spec.limits
    per_region, total = (_NO_LIMIT, _NO_LIMIT) if unlimited else (limits.max_vms_per_region, limits.max_vms)
    return ClusterConfig.model_construct(
        name=limits.name, gpu_type="simulated", gpu_count=spec.gpu_count, machine_type=spec.machine_type,
        regions=list(limits.regions), max_vms_per_region=per_region, max_vms=total, min_vms=limits.min_vms,
        provisioning=list(models or spec.models))


def policy_models(policy: Policy, cluster: SimCluster) -> tuple[str, ...]:
    """The provisioning models a policy's world has MIGs for: the policy's ``models(cluster_models)``
    when it has one (a baseline that keeps to one model), else every model the cluster lists. A policy none of whose
    models the scenario prices anywhere is unavailable (it could run no VM); one model of several priced nowhere is
    sold nowhere (``zen_dev.sim.scenario.close_unsold``), and the policy runs on the others."""
    choose = getattr(policy, "models", None)
    models = tuple(choose(cluster.models)) if choose is not None else cluster.models
    unpriced = [m for m in models if not cluster.priced_for(m)]
    if unpriced and len(unpriced) == len(models):
        raise PolicyUnavailable(f"policy {policy.name} runs {', '.join(unpriced)} VMs, which the scenario does not "
                                f"price for cluster {cluster.limits.name}")
    return models


def capacity_types(scenario: Scenario, cluster: SimCluster) -> dict[str, dict[str, str]]:
    """Model -> zone -> the capacity its VMs draw on there: none where the cluster's prices do not sell the model in
    that zone's region (``zen_dev.sim.scenario.close_unsold``); its own where the scenario gives it one in that
    zone (a step or trace with ``model:``), else the machine type's, shared by every model there."""
    keys = set(scenario.capacity.keys())
    out: dict[str, dict[str, str]] = {}
    for model in MODELS:
        for region, zones in cluster.zones.items():
            sold = cluster.sells(region, model)
            for zone in zones:
                own = next((key for key in (f"{cluster.machine_type}@{model}", f"@{model}") if (zone, key) in keys), None)
                out.setdefault(model, {})[zone] = (own or cluster.machine_type) if sold else unsold_key(
                    cluster.limits.name, model)
    return out


def unused_machine_types(scenario: Scenario) -> list[str]:
    """Capacity series for a zone some cluster runs in, of a machine type no cluster runs there ("type in zone"; a
    model's own, ``type@model``, by its type): read and never used, the zone keeps its other capacity or the
    default (a misspelt machine type among the series that apply). Zones no cluster runs in: ``unused_zones``."""
    runs = {(zone, c.machine_type) for c in scenario.clusters for zones in c.zones.values() for zone in zones}
    zones = {zone for zone, _ in runs}
    unsold = {unsold_key(c.limits.name, model) for c in scenario.clusters for model in MODELS}  # close_unsold's
    return sorted(f"{machine} in {zone}" for zone, key in scenario.capacity.keys()
                  if key and key not in unsold and zone in zones
                  and (machine := key.split("@")[0]) and (zone, machine) not in runs)


class TimedPolicy:
    """The policy as the manager calls it: each plan timed (``planner_s``) and the last one kept."""

    def __init__(self, policy: Policy, world):
        self.name, self._policy, self._result, self.last = policy.name, policy, world.result, Plan()

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        started = time.perf_counter()
        self.last = self._policy.plan(snapshot)
        self._result.planner_s += time.perf_counter() - started
        return self.last
