"""The simulator runs the production ClusterManager: its passes go through ``ClusterManager`` and
apply a plan exactly as the manager does against recording fakes of Compute."""

from __future__ import annotations

from zen.scaling.manager import ClusterManager, ClusterReport
from zen.scaling.model import ClusterSnapshot, Plan, Timing, VmPhase
from zen_dev.sim.jobs import load_jobs
from zen_dev.sim.policies import make_policy
from zen_dev.sim.ports import SimMigPort
from zen_dev.sim.world import Simulation, cluster_config

from tests.scaling.fakes import ports_like
from tests.sim.helpers import Recording, scenario

THREE_SHORT_JOBS = """
  kind: synthetic
  count: 3
  arrivals: {kind: burst, at_s: 1}
  duration: {dist: fixed, s: 60}"""
REGION = "us-central1"


class Scripted:
    """Asks for 5 VMs in one region (its limit is 3); once they are all idle, deletes one and asks
    for 2 more in the same pass; keeps that pass's snapshot and plan."""

    name = "scripted"

    def __init__(self):
        self.asked = False
        self.mixed: tuple[ClusterSnapshot, Plan] | None = None
        self.after: list[ClusterSnapshot] = []

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        if self.mixed is not None:
            self.after.append(snapshot)
            return Plan(memory=dict(snapshot.memory))
        if not self.asked:
            self.asked = True
            return Plan(add={REGION: 5})
        idle = sorted(vm.name for vm in snapshot.vms if vm.phase is VmPhase.IDLE)
        if len(idle) == 3 and not snapshot.demand_groups():
            plan = Plan(add={REGION: 2}, delete=[(REGION, idle[0])])
            self.mixed = (snapshot, plan)
            return plan
        return Plan()


def spy_on_apply(monkeypatch) -> list:
    """Every resize and deleteInstances the simulated MIGs get: (sim time, call)."""
    calls: list = []
    resize, delete = SimMigPort.resize, SimMigPort.delete_instances

    def spied_resize(self, size, together=()):
        calls.append((self._world.now, ("resize", self.region, size) + ((tuple(together),) if together else ())))
        resize(self, size, together)

    def spied_delete(self, names, zones):
        calls.append((self._world.now, ("delete_instances", self.region, sorted(names))))
        delete(self, names, zones)

    monkeypatch.setattr(SimMigPort, "resize", spied_resize)
    monkeypatch.setattr(SimMigPort, "delete_instances", spied_delete)
    return calls


def test_a_plan_with_adds_beyond_the_limit_and_deletes_applies_as_the_production_manager_does(monkeypatch):
    sc = scenario("default: 8", jobs=THREE_SHORT_JOBS, per_region=3, max_vms=9,
                  extra="delete_s: 0\nboot: {dist: fixed, s: 30}\nhorizon_s: 600")
    sim_calls = spy_on_apply(monkeypatch)
    policy = Scripted()
    result = Simulation(sc, load_jobs(sc), policy).run()
    assert result.limit_violations == 2 + 2  # 5 asked, 3 allowed; later 2 more into the full MIG
    assert sim_calls[0][1] == ("resize", REGION, 3)

    snapshot, plan = policy.mixed
    at = (snapshot.now - sc.spec.start_time).total_seconds()
    fake_calls: list = []
    migs, fleet = ports_like(snapshot, fake_calls)
    manager = ClusterManager(cluster_config(sc.clusters[0]), fleet, migs, lambda: snapshot.now, Timing(),
                             make_policy("single-region"))
    report = ClusterReport("4xa100")
    manager.apply(plan, snapshot, {vm.name: vm.zone for vm in snapshot.vms}, report)
    expected = [c for c in fake_calls if c[0] in ("resize", "delete_instances")]
    assert [call for t, call in sim_calls if t == at] == expected == [("delete_instances", REGION, [plan.delete[0][1]])]
    # adds first (the MIG is full: nothing added), then the deletion: the region is left with 2 VMs
    assert report.added == {} and policy.after[0].target_sizes[REGION] == 2
    assert sum(vm.region == REGION for vm in policy.after[0].vms) == 2


def test_every_pass_is_a_production_cluster_manager_pass(monkeypatch):
    built: list[ClusterSnapshot] = []
    snapshot = ClusterManager.snapshot

    def spied(self, report, states=None, read_at=None):
        out = snapshot(self, report, states, read_at)
        built.append(out[0])
        return out

    monkeypatch.setattr(ClusterManager, "snapshot", spied)
    sc = scenario("default: 2")
    policy = Recording(make_policy("failover"))
    result = Simulation(sc, load_jobs(sc), policy).run()
    assert result.ticks == len(policy.snapshots) == len(built) > 0
    assert all(given is made for given, made in zip(policy.snapshots, built))


def test_compute_calls_are_counted_as_the_adapter_makes_them():
    """An idle cluster costs one list call per region per tick (empty, stable MIGs are not read)."""
    sc = scenario("default: 2", jobs="""
  kind: synthetic
  count: 1
  arrivals: {kind: burst, at_s: 1000}
  duration: {dist: fixed, s: 60}""", extra="horizon_s: 590")
    result = Simulation(sc, load_jobs(sc), make_policy("failover")).run()
    assert result.ticks == 10 and result.api_calls == 10 * 3


class AsksTwiceOnce:
    """Asks for two VMs in one region at the first pass, then only keeps its memory."""

    name = "asks-two"

    def __init__(self):
        self.snapshots: list[ClusterSnapshot] = []

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        self.snapshots.append(snapshot)
        return Plan(add={} if len(self.snapshots) > 1 else {REGION: 2}, memory=dict(snapshot.memory))


def test_each_waiting_instance_reports_exactly_its_own_failures():
    """Two instances fail together (their failures are kept as one shared tuple); capacity for one
    returns at 600 s: the one placed then failed at 0, 30, ..., 600 (21: the retry that places it is
    counted too, as the simulator has always done), the other keeps failing until the last pass
    (1200 s) sees its failures up to 1180 s: 0, ..., 1170 (40). A shared, mutable record would give
    the second the first's last failures twice."""
    sc = scenario("""schedule:
    - {at_s: 0, zone: us-central1-a, capacity: 0}
    - {at_s: 600, zone: us-central1-a, capacity: 1}
  default: 0""", jobs="""
  kind: synthetic
  count: 1
  arrivals: {kind: burst, at_s: 5000}
  duration: {dist: fixed, s: 60}""", extra="horizon_s: 1200\nboot: {dist: fixed, s: 30}")
    policy = AsksTwiceOnce()
    world = Simulation(sc, load_jobs(sc), policy)
    world.run()
    failures: dict[str, int] = {}
    for snapshot in policy.snapshots:
        for error in snapshot.errors:
            failures[error.instance] = failures.get(error.instance, 0) + error.count
    vms = world.clusters["4xa100"].migs[REGION].vms
    placed = {name: vm.created_s for name, vm in vms.items()}
    assert sorted(placed.values(), key=lambda s: s is None) == [600.0, None]
    assert {name: failures[name] for name in vms} == {name: 21 if at == 600.0 else 40 for name, at in placed.items()}
