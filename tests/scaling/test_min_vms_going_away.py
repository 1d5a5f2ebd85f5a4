"""``min_vms`` is kept by VMs that stay: one on its way out (drained for a scale-down whose delete failed, retired at
its pull limit, or one this pass deletes as silent) stands for no warm VM. ``shrink_idle`` and ``cancel_losers``
count only VMs not being deleted (``VmIndex.alive``, ``probes.with_capacity``), but ``_keep_min`` counted every
instance listed: with the cluster's one VM drained and its delete answered 503 pass after pass, no warm VM was
asked for as long as Compute refused the delete, and the next job cold-booted; a retired VM finishing its last job
held min_vms until it was gone."""

from __future__ import annotations

from datetime import datetime, timezone

from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_planner import REGIONS, at, snap
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Action, ClusterLimits, Timing, Vm, VmPhase
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigApiError, MigInstance

LIMITS = ClusterLimits("c", REGIONS, max_vms_per_region=4, max_vms=6, min_vms=1)


def _going(name: str, region: str = "us-central1") -> Vm:
    return Vm(name, region, VmPhase.DELETING, at(0), retiring=True)


def test_a_drained_vm_still_listed_stands_for_no_min_vms_vm():
    plan = ZenPlanner().plan(snap(600, vms=[_going("drained")], limits=LIMITS))
    assert sum(plan.add.values()) == 1, (plan.add, [d.reason for d in plan.decisions])
    assert any(d.action is Action.ADD and "min_vms" in d.reason for d in plan.decisions)


def test_a_silent_vm_deleted_this_pass_is_replaced_for_min_vms_at_once():
    silent = Vm("silent", "us-central1", VmPhase.IDLE, at(0), heard_at=at(0))  # heard last an hour ago
    plan = ZenPlanner().plan(snap(3600, vms=[silent], limits=LIMITS, timing=Timing(agent_silence_s=180)))
    assert ("us-central1", "silent") in plan.delete
    assert sum(plan.add.values()) == 1, (plan.add, [d.reason for d in plan.decisions])


def test_the_replacement_stays_within_max_vms():
    limits = ClusterLimits("c", REGIONS, max_vms_per_region=4, max_vms=1, min_vms=1)
    plan = ZenPlanner().plan(snap(600, vms=[_going("drained")], limits=limits))
    assert plan.add == {}  # the drained VM holds the cluster's one place until it is gone


def test_min_vms_is_kept_while_every_delete_of_the_drained_vm_fails():
    now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    calls: list = []

    class Refusing(RecordingMig):
        def delete_instances(self, names, zones):
            self.calls.append(("delete_instances", self.region, sorted(names)))
            raise MigApiError("deleteInstances failed: 503 backendError")

    drained = MigInstance("drained", "us-central1-a", "NONE", "RUNNING", None)
    migs = {"us-central1": Refusing("us-central1", calls, 1, [drained]), "us-west1": RecordingMig("us-west1", calls)}
    idle = {"state": "IDLE", "idle_since": now, "last_seen_at": now}
    fleet = FakeFleet(FleetFacts((), {}, {"drained": idle}, {}, 0, drained=frozenset({"drained"})), now)
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=["us-central1", "us-west1"],
                           max_vms_per_region=4, max_vms=4, min_vms=1)
    manager = ClusterManager(config, fleet, migs, lambda: now, Timing(), ZenPlanner(), telemetry=False)
    for _ in range(3):  # pass after pass, the delete refused
        report = manager.run()
        assert "drained" not in report.deleted
    assert ("delete_instances", "us-central1", ["drained"]) in calls  # deleted again each pass
    assert sum(m.target for m in migs.values()) == 2, calls  # and one warm VM asked for, once
