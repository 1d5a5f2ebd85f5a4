"""A scenario's cluster is "like zen.core.config.ClusterConfig", and the scenario accepts every ClusterConfig
field. Production gives each cluster's planner that cluster's ``max_start_wait_s`` as its jobs' default start
bound (``ClusterOrchestrator``: ``replace(timing, max_start_wait_s=config.max_start_wait_s)``), and the planner
ranks pools by speed alone past it. The simulator accepted the field and dropped it (every manager got the
scenario's ``timing``), so zen was measured with 600 s whatever the scenario said.
"""

from zen_dev.sim.jobs import SimJob
from zen_dev.sim.policies import make_policy
from zen_dev.sim.scenario import parse_scenario
from zen_dev.sim.world import Simulation
from tests.sim.helpers import Recording

SCENARIO = """
clusters:
  - {name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [r1, r2], max_vms_per_region: 2, max_vms: 4,
     provisioning: [spot, standard], max_start_wait_s: 60}
zones: {r1: [r1-a], r2: [r2-a]}
capacity: {default: 2}
boot: {dist: fixed, s: 100}
prices: {r1: {spot: 1.0, standard: 3.0}, r2: {spot: 1.2, standard: 3.0}}
"""


def test_a_clusters_max_start_wait_reaches_its_planner():
    scenario = parse_scenario(SCENARIO, source="t.yaml")
    policy = Recording(make_policy("zen"))
    Simulation(scenario, [SimJob("j", "c", 0.0, 600.0, ("r1", "r2"))], policy, horizon_s=1200).run()
    assert policy.snapshots
    bounds = {snapshot.timing.max_start_wait_s for snapshot in policy.snapshots}
    assert bounds == {60}, f"the planner was given a start bound of {sorted(bounds)} s, not the cluster's 60 s"
