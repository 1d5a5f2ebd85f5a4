"""The run ends at its horizon: every VM still there is billed up to it (``Simulation._finish_run``), a VM being
deleted included (its ``delete_s`` is cut at the horizon). A spot VM preempted in the horizon's last ``stop_s``
seconds is billed its whole stop all the same (``_account``'s ``stop_s``), seconds past the end of the run that
no other VM is billed for."""

import pytest

from zen.core.prices import billed_seconds
from zen_dev.sim.jobs import SimJob
from zen_dev.sim.policies import make_policy
from zen_dev.sim.scenario import parse_scenario
from zen_dev.sim.world import Simulation

SCENARIO = """
clusters: [{name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [r1], max_vms_per_region: 1, max_vms: 1}]
zones: {r1: [r1-a]}
capacity: {default: 1, schedule: [{at_s: 1890, zone: r1-a, capacity: 0}]}
boot: {dist: fixed, s: 100}
unbilled_boot_fraction: 0.25
delete_s: 30
prices: {r1: {spot: 3.6}}
"""


def test_a_spot_vm_preempted_just_before_the_horizon_is_billed_no_further_than_it():
    scenario = parse_scenario(SCENARIO, source="t.yaml")
    result = Simulation(scenario, [SimJob("j", "c", 0.0, 3600.0, ("r1",))], make_policy("single-region"),
                        horizon_s=1900).run()
    assert result.preemptions == 1  # at 1,890 s, 10 s before the horizon
    # RUNNING from 25 s: billed to the horizon at most (1,875 s), as a VM still running or deleting there is.
    assert result.usd == pytest.approx(billed_seconds(1900 - 25) * 3.6 / 3600), \
        f"billed {result.usd * 3600 / 3.6:.0f} s: the stop's 30 s ran 20 s past the 1,900 s horizon"
