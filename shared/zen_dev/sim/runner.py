"""Run several policies on the same scenario, job trace and seed, side by side."""

from __future__ import annotations

from zen_dev.sim.jobs import SimJob
from zen_dev.sim.metrics import RunResult
from zen_dev.sim.policies import PolicyUnavailable, make_policy
from zen_dev.sim.scenario import Scenario
from zen_dev.sim.world import Simulation


def run_policies(scenario: Scenario, jobs: list[SimJob], policies: list[str], *, seed: int | None = None,
                 horizon_s: float | None = None, skipped: list[str] | None = None) -> dict[str, RunResult]:
    """One :class:`RunResult` per policy name; unavailable ones (``zen`` before its planner exists, a
    baseline on VMs the scenario does not price) are left out and said in ``skipped`` when given, each as
    ``policy NAME ...`` (why)."""
    results: dict[str, RunResult] = {}
    for name in policies:
        try:
            simulation = Simulation(scenario, jobs, make_policy(name), seed=seed, horizon_s=horizon_s)
        except PolicyUnavailable as why:
            if skipped is not None:
                skipped.append(str(why))
            continue
        results[name] = simulation.run()
    return results
