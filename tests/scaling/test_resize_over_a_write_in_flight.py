"""A MIG's resize is to an absolute size, computed from the target size just read; Compute marks a resize or a
deleteInstances DONE once its actions are scheduled, and until then the target size does not show it. A pass that
read the target while an earlier pass's deleteInstances was still in flight resized to that stale size plus its own
VMs: the delete landed, then the resize brought the MIG back above it, and GCE booted a new VM for each idle one Zen
had just deleted (billed for its boot and its idle time, for no job). A resize now waits for the MIG's writes still in
flight (bounded); one still not DONE holds the pass's adds there, asked again next pass (Compute stand-in whose writes
land when their operations are DONE, real Postgres, the functions)."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, _jobs, build_stack, vm_beat
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.scaling.port import MigApiError

OPERATION_S = 5  # a write's operation is RUNNING this long; the MIG shows the write only then


def _live(instances, region):
    return [i for i in instances(region) if not i.deleting]


def test_a_job_submitted_while_an_idle_vm_is_being_deleted_boots_one_vm_not_two(
        config, db, publisher, clock, monkeypatch, tmp_path):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances, standin = build_stack(
        config, db, publisher, clock, monkeypatch, tmp_path, capacity={"default": 4},
        api={"operation_delay_s": OPERATION_S, "writes_land_when_done": True})
    try:
        fn = FunctionsInvoker(zen)
        region = "us-west1"
        fn.submit(job_request("a", regions=[region]))
        advance(OPERATION_S + BOOT_S + 1)
        [vm] = vms = instances(region)
        assert vm.running
        fn.heartbeat(vm_beat(vm.name, region, "IDLE", 1, sent_at=clock().isoformat()))
        fn.heartbeat(heartbeat("a", "CLAIMED", 1, vm=vm.name, region=region, zone=vm.zone))
        fn.heartbeat(heartbeat("a", "SUCCEEDED", 2, vm=vm.name, region=region, zone=vm.zone, exit_code=0))
        fn.heartbeat(vm_beat(vm.name, region, "IDLE", 2, sent_at=clock().isoformat()))
        assert [(j.job_id, j.status.value) for j in _jobs(zen)] == [("a", "SUCCEEDED")]
        advance(zen.config.deadlines.idle_timeout_s + 1)
        fn.tick()  # the idle VM is drained and deleted: the deleteInstances is in flight

        assert [vm.name for vm in instances(region)] == [vm.name for vm in vms]  # still listed: not landed
        fn.submit(job_request("c", regions=[region]))  # its pass reads the target before the delete landed
        advance(OPERATION_S + 1)
        fn.tick()
        advance(OPERATION_S + 1)
        fn.tick()

        live = _live(instances, region)
        assert len(live) == 1, f"{len(live)} VMs booting for one job: {[vm.name for vm in live]}"
        assert not {vm.name for vm in live} & {vm.name for vm in vms}
        with zen.db.transaction() as session:
            decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
        assert any(d["action"] == "HOLD" and "still being carried out" in d["reason"] for d in decisions), decisions
    finally:
        standin.stop()


def test_a_resize_refuses_while_a_delete_of_its_mig_is_in_flight_and_goes_through_once_it_is_done(
        config, db, publisher, clock, monkeypatch, tmp_path):
    zen, advance, instances, standin = build_stack(
        config, db, publisher, clock, monkeypatch, tmp_path, capacity={"default": 4},
        api={"operation_delay_s": OPERATION_S, "writes_land_when_done": True})
    try:
        region = "us-west1"
        mig = MigManager(config.project, region, config.cluster(CLUSTER).mig_name(region), *compute_clients_from_env())
        mig.resize(2)
        advance(OPERATION_S + BOOT_S + 1)
        vms = mig.instances()
        assert mig.target_size() == 2 and all(vm.running for vm in vms)
        mig.delete_instances([vms[0].name], {vm.name: vm.zone for vm in vms})
        assert mig.target_size() == 2  # the delete is in flight: the target does not show it yet
        with pytest.raises(MigApiError) as busy:  # 2 read + 1 would land as 3 after the delete: two VMs added
            mig.resize(3)
        from zen.scaling.port import MigBusy

        assert isinstance(busy.value, MigBusy)
        advance(OPERATION_S + 1)
        assert mig.target_size() == 1
        mig.resize(2)
        advance(OPERATION_S + 1)
        assert mig.target_size() == 2 and len(_live(instances, region)) == 2
    finally:
        standin.stop()


def test_a_write_stuck_in_flight_holds_its_mig_for_a_while_not_for_ever(
        config, db, publisher, clock, monkeypatch, tmp_path):
    from zen.adapters import compute
    from zen.scaling.port import MigBusy

    zen, advance, instances, standin = build_stack(
        config, db, publisher, clock, monkeypatch, tmp_path, capacity={"default": 4},
        api={"operation_delay_s": 3600, "writes_land_when_done": True})
    try:
        monkeypatch.setattr(compute, "IN_FLIGHT_HOLD_S", 0.0)  # "a while": none
        region = "us-west1"
        mig = MigManager(config.project, region, config.cluster(CLUSTER).mig_name(region), *compute_clients_from_env())
        mig.resize(1)  # its operation stays RUNNING for an hour
        with pytest.raises(MigBusy):
            mig.resize(2)
        mig.resize(2)  # the same write still in flight, past the hold: the resize goes as it always did
        advance(3600 + 1)
        assert mig.target_size() == 2
    finally:
        standin.stop()


def test_a_resize_below_the_target_read_just_before_is_not_sent(config, db, publisher, clock, monkeypatch, tmp_path):
    """A pass that stood still between its read of the target and its resize (a request cut at its function's
    timeout, resumed after a later pass grew the MIG) asks for less than the MIG holds: sent, GCE would delete
    VMs of its choosing, a running job's among them."""
    from zen.scaling.port import MigBusy

    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path,
                                                   capacity={"default": 4})
    try:
        region = "us-west1"
        mig = MigManager(config.project, region, config.cluster(CLUSTER).mig_name(region), *compute_clients_from_env())
        mig.resize(3)  # the later pass's
        advance(BOOT_S + 1)
        with pytest.raises(MigBusy, match="is 3 already"):
            mig.resize(2)  # the resumed one's: 1 read before the other grew it, + 1
        advance(BOOT_S + 1)
        assert mig.target_size() == 3 and len(_live(instances, region)) == 3
    finally:
        standin.stop()
