"""ClusterManager's apply rules, through recording fakes of its ports (no Compute, no database)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from zen.core.config import ClusterConfig
from zen.scaling import vms as vms_module
from zen.scaling.manager import ClusterManager
from zen.scaling.model import ClusterSnapshot, Plan, Timing, VmPhase
from zen.scaling.port import FleetFacts, MigInstance, MigState
from zen.scaling.vms import classify

from tests.scaling.fakes import FakeFleet, RecordingMig

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
REGIONS = ["us-central1", "us-west1"]


class Fixed:
    """Returns one plan, whatever the snapshot; keeps the snapshot."""

    name = "fixed"

    def __init__(self, plan: Plan):
        self._plan, self.snapshots = plan, []

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        self.snapshots.append(snapshot)
        return self._plan


def running(name: str) -> MigInstance:
    return MigInstance(name, "us-central1-a", "NONE", "RUNNING", None)


def manager(plan: Plan, *, held: dict[str, str] | None = None, per_region: int = 3, max_vms: int = 4):
    calls: list = []
    idle = {"state": "IDLE", "idle_since": NOW, "last_seen_at": NOW}
    migs = {"us-central1": RecordingMig("us-central1", calls, 2, [running("a"), running("b")]),
            "us-west1": RecordingMig("us-west1", calls)}
    fleet = FakeFleet(FleetFacts((), held or {}, {"a": idle, "b": idle}, {}, 0), NOW)
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=REGIONS,
                           max_vms_per_region=per_region, max_vms=max_vms)
    return ClusterManager(config, fleet, migs, lambda: NOW, Timing(), Fixed(plan)), calls, fleet


def applied(calls: list) -> list:
    return [c for c in calls if c[0] in ("resize", "delete_instances")]


def test_adds_go_first_clamped_to_the_per_mig_limit_from_the_target_just_read():
    m, calls, _ = manager(Plan(add={"us-central1": 5}, delete=[("us-central1", "a")]))
    report = m.run()
    # adds first: the target (2) read again, resized to the limit (3); then the drained VM deleted
    assert applied(calls) == [("resize", "us-central1", 3), ("delete_instances", "us-central1", ["a"])]
    assert calls.index(("target_size", "us-central1")) < calls.index(("resize", "us-central1", 3))
    assert report.added == {"us-central1": 1} and report.deleted == ["a"]


def test_a_full_mig_gets_no_resize_and_the_cluster_cap_holds_whatever_the_plan_asks():
    m, calls, _ = manager(Plan(add={"us-central1": 1, "us-west1": 3}), per_region=2, max_vms=3)
    report = m.run()
    assert applied(calls) == [("resize", "us-west1", 1)]  # 2 VMs + 1 = the cluster's max_vms (3)
    assert report.added == {"us-west1": 1}


@pytest.mark.parametrize("max_vms, resized", [
    (4, ("resize", "us-west1", 2, (2,))),  # room for one gang: its unit alone
    (5, ("resize", "us-west1", 3, (2,))),  # one gang and one VM over: the VM goes with the rest
    (6, ("resize", "us-west1", 4, (2, 2))),
])
def test_the_gangs_passed_to_a_resize_are_those_that_fit_whole_in_what_the_limits_let_it_add(max_vms, resized):
    m, calls, _ = manager(Plan(add={"us-west1": 4}, together={"us-west1": [2, 2]}), per_region=4, max_vms=max_vms)
    m.run()
    assert applied(calls) == [resized]


def test_a_vm_holding_a_job_is_never_deleted_and_deletions_are_one_call_per_region():
    m, calls, fleet = manager(Plan(delete=[("us-central1", "a"), ("us-central1", "b")]), held={"a": "job-1"})
    report = m.run()
    assert report.kept_busy == ["a"] and fleet.drained == ["b"]
    assert applied(calls) == [("delete_instances", "us-central1", ["b"])]


def test_the_snapshot_comes_from_the_ports_and_the_plan_is_recorded():
    plan = Plan(add={"us-west1": 1})
    m, _, fleet = manager(plan)
    m.run()
    snapshot = m.policy.snapshots[0]
    assert snapshot.target_sizes == {"us-central1": 2, "us-west1": 0}
    assert sorted((vm.name, vm.phase.value) for vm in snapshot.vms) == [("a", "IDLE"), ("b", "IDLE")]
    assert fleet.recorded == [(plan.memory, plan.decisions)]


class SameListMig(RecordingMig):
    """Lists the very same instance objects while nothing changes (as the simulator's MIGs do)."""

    def read(self, since=None, summary=None) -> MigState:
        self.calls.append(("read", self.region))
        return MigState(self.target, self.instances, [])


def test_a_vm_follows_its_job_and_agent_when_its_mig_lists_the_same_instances():
    """The manager keeps its views of VMs whose instance objects did not change (the simulator's MIGs
    list the same ones): a VM whose job or agent changed is still seen anew."""
    calls: list = []
    idle = {"state": "IDLE", "idle_since": NOW, "last_seen_at": NOW}
    migs = {"us-central1": SameListMig("us-central1", calls, 2, [running("a"), running("b")]),
            "us-west1": SameListMig("us-west1", calls, 1, [running("c")])}
    fleet = FakeFleet(FleetFacts((), {}, {"a": idle, "b": idle, "c": idle}, {}, 0), NOW)
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=REGIONS,
                           max_vms_per_region=3, max_vms=4)
    policy = Fixed(Plan())
    m = ClusterManager(config, fleet, migs, lambda: NOW, Timing(), policy)
    m.run()
    fleet._facts = FleetFacts((), {"a": "job-1"}, {"a": idle, "b": idle, "c": dict(idle)}, {}, 0)
    m.run()
    second = policy.snapshots[1]
    assert {vm.name: (vm.phase, vm.job_id) for vm in second.vms} == {
        "a": (VmPhase.BUSY, "job-1"), "b": (VmPhase.IDLE, None), "c": (VmPhase.IDLE, None)}


def test_a_fleet_saying_which_vms_changed_has_only_their_regions_read_again(monkeypatch):
    """``FleetFacts.changed`` (the simulator's hint): regions listing the same instances, none of whose
    VMs changed, are taken whole from the last pass; a region with a changed VM is read again; a hint
    about other dicts than the manager last read is ignored (every VM checked)."""
    calls: list = []
    idle = {"state": "IDLE", "idle_since": NOW, "last_seen_at": NOW}
    migs = {"us-central1": SameListMig("us-central1", calls, 2, [running("a"), running("b")]),
            "us-west1": SameListMig("us-west1", calls, 1, [running("c")])}
    held, agents = {}, {"a": idle, "b": idle, "c": idle}
    fleet = FakeFleet(FleetFacts((), held, agents, {}, 0), NOW)
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=REGIONS,
                           max_vms_per_region=3, max_vms=4)
    policy = Fixed(Plan())
    m = ClusterManager(config, fleet, migs, lambda: NOW, Timing(), policy)
    m.run()
    rebuilt: list[str] = []
    monkeypatch.setattr(vms_module, "classify",
                        lambda instance, *args: rebuilt.append(instance.name) or classify(instance, *args))
    held2 = {"c": "job-1"}
    fleet._facts = FleetFacts((), held2, agents, {}, 0, (held, agents, frozenset({"c"})))
    m.run()
    assert rebuilt == ["c"]  # us-central1 taken whole; c read again
    assert {v.name: (v.phase, v.job_id) for v in policy.snapshots[1].vms} == {
        "a": (VmPhase.IDLE, None), "b": (VmPhase.IDLE, None), "c": (VmPhase.BUSY, "job-1")}
    # a hint about dicts the manager never read says nothing: a's new job is still seen
    fleet._facts = FleetFacts((), {"a": "job-2", "c": "job-1"}, agents, {}, 0, ({}, {}, frozenset()))
    m.run()
    assert {v.name: v.job_id for v in policy.snapshots[2].vms} == {"a": "job-2", "b": None, "c": "job-1"}


def test_the_coverage_a_pass_leaves_counts_no_idle_vm_it_deleted():
    """Coverage spares the next submissions (10 s) their pass: the idle VMs this pass deleted cover no job."""
    later = NOW + timedelta(seconds=1)
    m, _, _ = manager(Plan(delete=[("us-central1", "a"), ("us-central1", "b")]), max_vms=2)
    report = m.run()
    assert sorted(report.deleted) == ["a", "b"]
    assert report.coverage.spare == 0 and not report.coverage.saturated  # room again: 2 VMs gone
    assert not report.coverage.covers(later)
    m, _, _ = manager(Plan(delete=[("us-central1", "a")]))
    coverage = m.run().coverage
    assert coverage.spare == 1 and coverage.covers(later) and not coverage.covers(later)  # b, once
