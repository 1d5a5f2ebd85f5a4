"""Small scenarios and policies for the simulator tests."""

from __future__ import annotations

from zen.scaling.model import ClusterSnapshot, Plan, VmPhase
from zen_dev.sim.scenario import Scenario, parse_scenario

THREE_REGIONS = "[us-central1, us-west1, europe-west4]"


def scenario(capacity: str = "default: 4", *, jobs: str | None = None, regions: str = THREE_REGIONS,
             per_region: int = 4, max_vms: int = 12, extra: str = "") -> Scenario:
    jobs = jobs or """
  kind: synthetic
  count: 40
  arrivals: {kind: poisson, rate_per_hour: 30}
  duration: {dist: lognormal, median_s: 900, sigma: 0.5}"""
    text = f"""
seed: 3
clusters:
  - {{name: 4xa100, gpu_count: 4, machine_type: a2-highgpu-4g, regions: {regions},
     max_vms_per_region: {per_region}, max_vms: {max_vms}}}
zones:
  us-central1: [us-central1-a]
  us-west1: [us-west1-a]
  europe-west4: [europe-west4-a]
capacity:
  {capacity}
jobs:{jobs}
{extra}
"""
    return parse_scenario(text, source="test.yaml", name="test")


class Greedy:
    """Asks far beyond every limit and deletes every VM it sees, busy or not; records snapshots."""

    name = "greedy"

    def __init__(self):
        self.snapshots: list[ClusterSnapshot] = []

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        self.snapshots.append(snapshot)
        plan = Plan(add={r: 100 for r in snapshot.cluster.regions})
        plan.delete = [(vm.region, vm.name) for vm in snapshot.vms if vm.phase is not VmPhase.DELETING]
        return plan


class Recording:
    """Wraps a policy and keeps every snapshot it was given."""

    def __init__(self, inner):
        self.inner, self.name = inner, inner.name
        self.single_use = getattr(inner, "single_use", False)
        self.ignores_capacity = getattr(inner, "ignores_capacity", False)
        self.cancel_losers_on_start = getattr(inner, "cancel_losers_on_start", False)
        self.hears_running = getattr(inner, "hears_running", False)
        self.routes_by_data = getattr(inner, "routes_by_data", False)
        self.snapshots: list[ClusterSnapshot] = []

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        self.snapshots.append(snapshot)
        return self.inner.plan(snapshot)
