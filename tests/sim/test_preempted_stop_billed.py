"""A spot VM that GCE preempts is billed until it has stopped, as a deleted VM is billed through DELETING.

The simulator ends a preempted incarnation's bill at the preemption instant (instances.py ``_account`` is
called with ``end=self.now`` from ``world._preempt``), while a VM the policy deletes is billed ``delete_s``
more (its STOPPING). A spot VM taken back therefore costs nothing for its stop, which makes spot pools (zen,
cheapest-first) look cheaper against ask-every-region-standard, whose standard VMs are never preempted.
"""

import pytest

from zen.core.prices import billed_seconds
from zen_dev.sim.jobs import SimJob
from zen_dev.sim.policies import make_policy
from zen_dev.sim.scenario import parse_scenario
from zen_dev.sim.world import Simulation

SCENARIO = """
clusters: [{name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [r1], max_vms_per_region: 1, max_vms: 1}]
zones: {r1: [r1-a]}
capacity: {default: 1, schedule: [{at_s: 1000, zone: r1-a, capacity: 0}]}
boot: {dist: fixed, s: 100}
unbilled_boot_fraction: 0.25
delete_s: 30
prices: {r1: {spot: 3.6}}
"""


@pytest.mark.parametrize("policy", ["single-region", "cheapest-first", "zen"])
def test_a_preempted_spot_vm_is_billed_through_its_stop(policy):
    # RUNNING at 25 s (a quarter of the 100 s boot), usable at 100 s, its job runs from 100 s; r1-a drops
    # to no capacity at 1,000 s and GCE takes the spot VM back. It is billed from RUNNING until it has
    # stopped: 975 s up to the preemption, and its stop after (preemption.stop_s, 30 s by default:
    # GCE gives a preempted VM 30 s to shut down).
    scenario = parse_scenario(SCENARIO, source="t.yaml")
    result = Simulation(scenario, [SimJob("j", "c", 0.0, 3600.0, ("r1",))], make_policy(policy),
                        horizon_s=1900).run()
    assert result.preemptions == 1
    # The recreated VM waits for capacity until the horizon: only the first incarnation is billed.
    assert result.usd == pytest.approx(billed_seconds(975 + 30) * 3.6 / 3600)


def test_a_spot_vm_preempted_just_before_the_horizon_is_billed_no_further_than_it():
    """Every VM is billed up to the horizon at most (``Simulation._finish_run``), a deleting one too: a spot VM
    preempted in the horizon's last ``stop_s`` seconds was billed its whole stop, past the end of the run."""
    scenario = parse_scenario(SCENARIO.replace("at_s: 1000", "at_s: 1890"), source="t.yaml")
    result = Simulation(scenario, [SimJob("j", "c", 0.0, 3600.0, ("r1",))], make_policy("single-region"),
                        horizon_s=1900).run()
    assert result.preemptions == 1  # at 1,890 s, 10 s before the horizon
    assert result.usd == pytest.approx(billed_seconds(1900 - 25) * 3.6 / 3600)  # RUNNING from 25 s, to the horizon
