"""The instance statuses Compute lists for a VM on its way down, or still waiting for capacity, beyond the classic
ones: ``PENDING_STOP`` (shutting down gracefully), ``DEPROVISIONING`` (halted, its quota, IP and disks being
released) and ``PENDING`` (a flex-start VM waiting for capacity), all in ``ManagedInstance.InstanceStatus`` of the
pinned google-cloud-compute. A VM GCE takes down is no booting VM: Zen read one DEPROVISIONING with no action of
its MIG's as a VM booting with capacity (its status neither RUNNING nor a halted one), which covered a queued job in
place of a new VM, and a spot VM so listed was not deleted. A VM PENDING, or one its MIG recreates while the old
VM is still going down, has not got capacity: it is a probe waiting for it, billed nothing."""

from __future__ import annotations

from tests.scaling.test_retired_vms import NOW, deletions, manager
from tests.scaling.test_standard_vm_restarting import _run
from zen.scaling.model import Action, DemandGroup, VmPhase
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import MigInstance
from zen.scaling.vms import classify

GOING_DOWN = ("PENDING_STOP", "DEPROVISIONING")


def test_a_vm_going_down_with_no_action_of_its_mig_is_no_supply_and_a_spot_one_is_deleted():
    for status in GOING_DOWN:
        deleted, phases = _run(status, heard_s_ago=5)  # a standard VM: GCE restarts it under its name
        assert deleted == [] and phases == {"vm-a": VmPhase.DELETING}, (status, deleted, phases)
        assert _run(status, heard_s_ago=5, provisioning="spot")[0] == [("delete_instances", "us-central1", ["vm-a"])]


def test_an_idle_vm_deprovisioning_does_not_cover_a_queued_job_the_planner_asks_for_another():
    demand = [DemandGroup(("us-central1", "us-west1"), 1, NOW, 0)]
    down = MigInstance("vm-d", "us-central1-a", "NONE", "DEPROVISIONING", None)
    m, calls, _ = manager(ZenPlanner(), instances=[down], states={"vm-d": "IDLE"}, demand=demand, provisioning=["spot"])

    report = m.run()

    assert sum(report.added.values()) >= 1, report.decisions
    assert deletions(calls) == [("delete_instances", "us-central1", ["vm-d"])]
    assert any(d.action is Action.DELETE and d.vm == "vm-d" and "DEPROVISIONING" in d.reason for d in report.decisions)


def test_only_a_vm_given_capacity_is_started_not_one_pending_nor_one_recreated_while_its_old_vm_goes_down():
    def started(action: str, status: str) -> bool:
        vm = classify(MigInstance("vm-b", "us-central1-a", action, status, None), "us-central1", NOW, {}, {})
        assert vm.phase is VmPhase.BOOTING, (action, status, vm.phase)
        return vm.started

    assert [started("CREATING", s) for s in ("", "PENDING", "PROVISIONING", "STAGING", "RUNNING")] == [
        False, False, True, True, True]
    assert [started("RECREATING", s) for s in ("STOPPING", "DEPROVISIONING", "TERMINATED", "PROVISIONING")] == [
        False, False, False, True]
