"""Pools a scenario's prices do not sell (``zen_dev.sim.scenario.close_unsold``): no policy's world places or bills
a VM in them, ``unlimited`` (which ignores capacity and limits) included."""

from __future__ import annotations

from zen_dev.sim.jobs import SimJob
from zen_dev.sim.runner import run_policies
from zen_dev.sim.scenario import parse_scenario

# r2 sells no spot VMs of the shape: its table lists standard alone.
SCENARIO = """
clusters: [{name: c, gpu_count: 1, machine_type: a2-highgpu-1g, regions: [r1, r2], max_vms_per_region: 4, max_vms: 8,
            provisioning: [spot, standard]}]
zones: {r1: [r1-a], r2: [r2-a]}
capacity: {default: 4}
boot: {dist: fixed, s: 60}
delete_s: 0
prices: {r1: {spot: 1.0, standard: 3.0}, r2: {standard: 4.0}}
"""


def test_unlimited_places_no_vm_in_a_pool_the_prices_do_not_sell():
    """``unlimited`` runs the cluster's primary model (spot) in every region whatever the capacity: in r2, which
    sells no spot, its VMs were placed and billed nothing, so its start times and dollars (the bench's reference)
    came from VMs no one sells. A job allowed only there waits, as for every other spot-only policy."""
    scenario = parse_scenario(SCENARIO, source="t.yaml", name="t")
    jobs = [SimJob("near", "c", 0.0, 600.0, ("r1",)), SimJob("far", "c", 1.0, 600.0, ("r2",))]
    results = run_policies(scenario, jobs, ["unlimited", "ask-every-region"], horizon_s=3000)
    for name, result in results.items():
        near, far = sorted(result.starts)  # (submitted, started): near at 0 s, far at 1 s
        assert near[1] is not None and far[1] is None, (name, result.starts)
        assert result.vms_created == 1, (name, result.vms_created)


def test_a_model_the_cluster_lists_and_no_region_prices_leaves_its_other_models_running():
    """A cluster listing spot and standard, with standard alone priced: zen and ``cheapest-first`` were skipped
    (each runs every model the cluster lists, and spot was unpriced), so a harness got ``ask-every-region-standard``
    alone, exit 0. Now spot is sold nowhere and they run on standard; a baseline on spot alone is skipped."""
    scenario = parse_scenario(SCENARIO.replace("r1: {spot: 1.0, standard: 3.0}", "r1: {standard: 3.0}"),
                              source="t.yaml", name="t")
    skipped: list[str] = []
    jobs = [SimJob("near", "c", 0.0, 600.0, ("r1",)), SimJob("far", "c", 1.0, 600.0, ("r2",))]
    results = run_policies(scenario, jobs, ["zen", "cheapest-first", "ask-every-region"], horizon_s=3000,
                           skipped=skipped)
    assert list(results) == ["zen", "cheapest-first"] and len(skipped) == 1 and "ask-every-region" in skipped[0]
    for name, result in results.items():
        assert all(start is not None for _, start in result.starts) and result.usd > 0, (name, result.starts)
