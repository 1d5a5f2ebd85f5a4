"""A baseline places each gang whole, in one pool. ``cheapest-first`` (and ``failover``) took a gang's VMs in
the first pools with room, one by one: a 3-node gang with room for one more VM in the cheapest pool asked for 1
there and 2 in the next. A flex-start pool asks for a gang in one all-or-nothing request, so the manager refused
that 1 (counted in ``limit_violations``, which the baselines keep at 0), and elsewhere the gang's VMs sat in two
regions where it could never assemble. Each gang now goes to the first pool that holds it whole (its idle or
booting VMs there, then room for the rest), as SkyPilot provisions a multi-node cluster in one place or fails
over (``zen_dev.sim.policies._DemandSized``)."""

from __future__ import annotations

import pytest

from zen_dev.sim import policies
from zen_dev.sim.jobs import load_jobs
from zen_dev.sim.runner import run_policies
from zen_dev.sim.scenario import parse_scenario

SCENARIO = """
seed: 5
horizon_s: 20000
clusters:
  - {name: c8, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [us-central1, us-west1],
     max_vms_per_region: 4, max_vms: 12, provisioning: [spot, flex-start]}
zones: {us-central1: [us-central1-a], us-west1: [us-west1-a]}
capacity: {default: 6}
flex_start: {grant: {dist: fixed, s: 120}}
prices:
  us-central1: {spot: 2.0, flex-start: 1.0}
  us-west1: {spot: 2.2, flex-start: 1.1}
jobs: {kind: synthetic, count: 4, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 1200},
       nodes: {3: 1}}
"""


@pytest.mark.parametrize("policy", ["cheapest-first", "failover"])
def test_each_gang_is_asked_for_whole_in_one_pool(policy, monkeypatch):
    adds: list[dict[str, int]] = []
    plan = policies._DemandSized.plan

    def recorded(self, snapshot):
        out = plan(self, snapshot)
        adds.append(dict(out.add))
        return out
    monkeypatch.setattr(policies._DemandSized, "plan", recorded)
    scenario = parse_scenario(SCENARIO, source="test.yaml", name="test")
    result = run_policies(scenario, load_jobs(scenario), [policy], seed=5)[policy]
    # Four 3-node gangs at once, pools of 4 VMs: the first pass asks for one gang a pool, none split.
    assert adds[0] and all(n % 3 == 0 for n in adds[0].values()), adds[0]
    assert result.limit_violations == 0, result.summary()
    assert result.summary()["never_started"] == 0, result.summary()
