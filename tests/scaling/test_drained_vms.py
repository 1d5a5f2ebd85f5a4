"""A VM drained for a scale-down whose delete failed (429/5xx, an operation error, the function died
between the drain and the delete) stays in its MIG, drained: it refuses every claim. It must be no
supply (else a queued job waits on it forever, and since the job 'needs' it it is never deleted) and
its delete is issued again each pass. First through the manager's recording fakes, then end to end
(Compute stand-in, real Postgres, the heartbeat function)."""

from __future__ import annotations

from datetime import datetime, timezone

from tests.messages import heartbeat, job_request
from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, _jobs, idle_after_a_job, stack, vm_beat  # noqa: F401
from zen.adapters.compute import MigManager
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager, ClusterReport
from zen.scaling.model import Action, DemandGroup, Timing, VmPhase
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigApiError, MigInstance

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
REGIONS = ["us-central1", "us-west1"]


def test_a_drained_vm_still_running_is_no_supply_and_is_deleted_again():
    calls: list = []
    idle = {"state": "IDLE", "idle_since": NOW, "last_seen_at": NOW}
    drained = MigInstance("drained", "us-central1-a", "NONE", "RUNNING", None)
    migs = {"us-central1": RecordingMig("us-central1", calls, 1, [drained]), "us-west1": RecordingMig("us-west1", calls)}
    demand = (DemandGroup(tuple(REGIONS), 1, NOW),)
    fleet = FakeFleet(FleetFacts(demand, {}, {"drained": idle}, {}, 0, drained=frozenset({"drained"})), NOW)
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=REGIONS,
                           max_vms_per_region=4, max_vms=4)
    m = ClusterManager(config, fleet, migs, lambda: NOW, Timing(), ZenPlanner(), telemetry=False)

    [vm] = m.snapshot(ClusterReport("c"))[0].vms
    assert vm.phase is VmPhase.DELETING  # not idle supply, though its agent says IDLE
    report = m.run()
    assert report.added  # the queued job gets a VM of its own
    assert [c for c in calls if c[0] == "delete_instances"] == [("delete_instances", "us-central1", ["drained"])]
    assert [d for d in report.decisions if d.action is Action.DELETE and d.vm == "drained"]


def test_a_vm_whose_delete_failed_after_the_drain_is_deleted_later_and_the_queue_moves(stack, clock, monkeypatch):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    vm = idle_after_a_job(fn, stack, clock)
    advance(zen.config.deadlines.idle_timeout_s + 1)

    def failing(self, names, zones):
        raise MigApiError("deleteInstances failed: 503 backendError")

    with monkeypatch.context() as patch:
        patch.setattr(MigManager, "delete_instances", failing)
        report = zen.scaler.tick()[CLUSTER]
    assert report.errors and "delete in us-west1" in report.errors[0]
    assert [i.name for i in instances("us-west1")] == [vm.name]  # still there, drained

    fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 3, sent_at=clock().isoformat()))  # its agent is fine
    fn.submit(job_request("b", regions=["us-west1"]))  # Compute is fine again
    names = [i.name for i in instances("us-west1")]
    assert vm.name not in names  # deleted at last
    assert len(names) == 1  # b's own VM asked: the drained one was not counted as idle supply
    advance(BOOT_S + 1)
    [new] = instances("us-west1")
    fn.heartbeat(vm_beat(new.name, "us-west1", "IDLE", 1, sent_at=clock().isoformat()))
    fn.heartbeat(heartbeat("b", "CLAIMED", 1, vm=new.name, region="us-west1", zone=new.zone))
    assert [j.status.value for j in _jobs(zen) if j.job_id == "b"] == ["ASSIGNED"]
