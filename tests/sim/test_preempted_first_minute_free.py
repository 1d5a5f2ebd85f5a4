"""A spot VM GCE takes back in its first minute is not billed at all (GCE: "If Compute Engine preempts Spot
VMs less than one minute after they are created, you are not billed for the use of those VMs"; its GPUs
"if their VMs are preempted in the first minute after they start running"), neither the one-minute minimum
nor its stop. Every policy that runs spot VMs is billed so; a VM preempted later pays as any other
(tests/sim/test_preempted_stop_billed.py)."""

import pytest

from zen.core.prices import billed_seconds
from zen_dev.sim.jobs import SimJob
from zen_dev.sim.policies import make_policy
from zen_dev.sim.scenario import parse_scenario
from zen_dev.sim.world import Simulation

SCENARIO = """
clusters: [{name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [r1], max_vms_per_region: 1, max_vms: 1}]
zones: {r1: [r1-a]}
capacity: {default: 1, schedule: [{at_s: DROP, zone: r1-a, capacity: 0}]}
boot: {dist: fixed, s: 20}
guest_boot: {dist: fixed, s: 10}
delete_s: 30
prices: {r1: {spot: 3.6}}
"""


def _run(policy: str, drop_s: int):
    scenario = parse_scenario(SCENARIO.replace("DROP", str(drop_s)), source="t.yaml")
    return Simulation(scenario, [SimJob("j", "c", 0.0, 3600.0, ("r1",), checkpoint_every_s=10.0)],
                      make_policy(policy), horizon_s=600).run()


@pytest.mark.parametrize("policy", ["zen", "ask-every-region", "cheapest-first", "single-region"])
def test_a_spot_vm_preempted_in_its_first_minute_costs_nothing(policy):
    # Capacity found at 0 s, RUNNING at 20 s (provisioning), its job from 30 s; r1-a drops to no capacity at
    # 50 s and GCE takes the VM back, 30 s into RUNNING and 50 s after it was created: not billed. The
    # recreated VM waits for capacity until the horizon, so nothing is paid.
    result = _run(policy, 50)
    assert result.preemptions == 1
    assert result.usd == 0.0
    assert all(getattr(result, part) == 0.0 for part in ("usd_useful", "usd_rework", "usd_boot", "usd_idle",
                                                         "usd_unused_vms"))
    # Its job's 20 s of run are still counted: 20 s kept by its checkpoints (useful), nothing thrown away.
    assert result.useful_gpu_seconds == pytest.approx(20.0 * 4)
    assert result.rework_gpu_seconds == pytest.approx(0.0)


def test_a_spot_vm_preempted_after_its_first_minute_is_billed_as_before():
    # Preempted at 90 s, 70 s into RUNNING: billed from RUNNING to its preemption and its 30 s stop.
    result = _run("zen", 90)
    assert result.preemptions == 1
    assert result.usd == pytest.approx(billed_seconds(70 + 30) * 3.6 / 3600)
