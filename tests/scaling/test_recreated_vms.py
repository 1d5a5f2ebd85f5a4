"""A preempted spot VM that its MIG recreates (same name, ``instance_termination_action = DELETE``) while its
region is out of capacity comes back RUNNING long after its old agent's last word (STOPPING). That word was
the VM that went; the recreated VM's agent has not spoken yet (a guest boot). A pass that took the old word
for the new VM deleted the VM the region had just given back (the capacity the requeued job waited for) as
silent, and asked for another one (zen.scaling.vms.classify, ``rebooted``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.messages import heartbeat, job_request
from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_scaling_integration import CLUSTER, build_stack, vm_beat
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Action, DemandGroup, RegionMemory, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigInstance

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("word", ["STOPPING", "IDLE", "BUSY", "RETIRED"])
def test_a_recreated_spot_vm_back_running_is_not_deleted_on_its_predecessors_word(word):
    """Fakes: the last pass saw the instance being recreated (booting); now it is RUNNING again, its agent
    not heard yet; the old agent said STOPPING ten minutes ago (or IDLE or BUSY: its STOPPING was lost as its
    VM went, and the recreated VM was deleted as an idle or busy VM silent since; or RETIRED, its pull limit
    reached on its last job: the recreated VM was deleted as retired); its job was requeued and waits."""
    calls: list = []
    back = MigInstance("spot-1", "us-central1-a", "NONE", "RUNNING", None)
    migs = {"us-central1": RecordingMig("us-central1", calls, 1, [back])}
    old = NOW - timedelta(minutes=10)
    said = {"spot-1": {"state": word, "idle_since": old if word == "IDLE" else None, "last_seen_at": old}}
    demand = (DemandGroup(("us-central1",), 1, NOW - timedelta(minutes=10)),)
    memory = {"us-central1": RegionMemory(last_boot_at=NOW - timedelta(hours=1), booting=("spot-1",),
                                          booting_since=((NOW - timedelta(minutes=9)).timestamp(),),
                                          known=("spot-1",))}
    fleet = FakeFleet(FleetFacts(demand, {}, said, memory, 0), NOW - timedelta(days=1))
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=["us-central1"],
                           max_vms_per_region=4, max_vms=4)
    report = ClusterManager(config, fleet, migs, lambda: NOW, Timing(), ZenPlanner(), telemetry=False).run()
    deleted = [d for d in report.decisions if d.action is Action.DELETE]
    assert not deleted, [d.reason for d in deleted]
    assert report.added == {}, report.added  # the recreated VM is the job's: no second VM asked


def test_end_to_end_a_spot_vm_recreated_after_a_stockout_is_kept_as_it_comes_back(
        config, db, publisher, clock, monkeypatch, tmp_path):
    from zen_dev.local.invoke import FunctionsInvoker

    west = [f"us-west1-{z}" for z in "abc"]
    capacity = {"default": 4, "schedule": [
        *[{"at_s": 0, "zone": f"us-central1-{z}", "capacity": 0} for z in "abc"],
        *[{"at_s": 100, "zone": z, "capacity": 0} for z in west],  # the region runs out ...
        *[{"at_s": 700, "zone": z, "capacity": 4} for z in west]]}  # ... and recovers
    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path,
                                                   capacity=capacity)
    try:
        fn = FunctionsInvoker(zen)
        fn.submit(job_request("a", regions=["us-west1"]))
        advance(61)
        [vm] = instances("us-west1")
        assert vm.running
        fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 1, sent_at=clock().isoformat()))
        fn.heartbeat(heartbeat("a", "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone))
        fn.heartbeat(heartbeat("a", "RUNNING", 2, vm=vm.name, region="us-west1", zone=vm.zone))
        advance(60)  # t=121: the region has no capacity left; the spot VM is preempted
        with standin.world.lock:
            standin.world.advance()
            inst = standin.world.migs[("us-west1", config.cluster(CLUSTER).mig_name("us-west1"))].instances[vm.name]
            assert standin.world.preempt(inst)
        fn.heartbeat(vm_beat(vm.name, "us-west1", "STOPPING", 2, sent_at=clock().isoformat()))  # its agent's last word
        fn.heartbeat(heartbeat("a", "PREEMPTED", 3, vm=vm.name, region="us-west1", zone=vm.zone))
        for _ in range(10):  # ticks while the MIG tries to recreate it (stockout: it is the region's probe)
            advance(60)
            fn.tick()
            assert [i.name for i in instances("us-west1")] == [vm.name]
        # t~721: capacity is back; the MIG recreated it; it boots (60 s) and is RUNNING again
        advance(75)
        [back] = instances("us-west1")
        assert back.name == vm.name and back.running
        fn.tick()  # its new agent has not spoken yet (guest boot)
        names = [(i.name, i.current_action) for i in instances("us-west1")]
        with zen.db.transaction() as session:
            why = [(r["action"], r["vm"], r["reason"]) for r in session.run("recent_scaling_decisions", cluster=CLUSTER,
                                                                           limit=3)]
        assert names == [(vm.name, "NONE")], f"the recreated VM was deleted (or replaced): {names}; decisions {why}"
    finally:
        standin.stop()


def test_a_recreated_spot_vm_is_not_deleted_on_a_view_one_process_cached_before_its_preemption():
    """Each function instance's ClusterManager keeps its VMs' views between passes. One looked while spot-1
    was idle; then spot-1 was preempted and recreated, which other processes' passes saw (its region's memory:
    booting since its predecessor's last word). Its listing, first sight and old agent row unchanged, the first
    process kept its idle view: the VM back for the requeued job was deleted as silent and another asked for."""
    region = "us-central1"
    running = MigInstance("spot-1", f"{region}-a", "NONE", "RUNNING", None)
    last_word = NOW - timedelta(seconds=10)  # the old agent's last heartbeat (IDLE); then it was preempted
    agent = {"state": "IDLE", "idle_since": last_word, "last_seen_at": last_word,
             "first_seen_at": NOW - timedelta(days=1), "heard_since": None}
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=[region],
                           max_vms_per_region=4, max_vms=4)
    clock = {"now": NOW}
    fleet = FakeFleet(FleetFacts((), {}, {"spot-1": dict(agent)}, {}, 0), NOW - timedelta(days=1))
    cached = ClusterManager(config, fleet, {region: RecordingMig(region, [], 1, [running])}, lambda: clock["now"],
                            Timing(), ZenPlanner(), telemetry=False)
    assert not [d for d in cached.run().decisions if d.action is Action.DELETE]

    memory = {region: RegionMemory(last_boot_at=NOW - timedelta(hours=1), booting=("spot-1",),
                                   booting_since=(last_word.timestamp(),), known=("spot-1",))}
    clock["now"] = NOW + timedelta(seconds=240)
    fleet._facts = FleetFacts((DemandGroup((region,), 1, NOW + timedelta(seconds=20)),), {}, {"spot-1": dict(agent)},
                              memory, 1)  # the rows read anew, their contents the same
    report = cached.run()

    assert not [d.reason for d in report.decisions if d.action is Action.DELETE]
    assert report.added == {}  # nor a second VM for the job spot-1 is back for
