"""A standard VM a host event stopped is restarted under its name by GCE (``automatic_restart``), its MIG doing
nothing meanwhile: a pass that lists it STOPPING or TERMINATED, its agent heard moments ago saying it shuts down (a
host maintenance notice: its job requeued), leaves it to come back. Zen deleted it at the first sight of its
termination, as an instance GCE holds halted ("no VM that runs jobs"): on the whole local stack the VM
``simulateMaintenanceEvent`` stopped never restarted, and the job's rerun waited for a new VM's boot (in a stockout,
for capacity). A halted standard VM whose agent stays silent past ``agent_silence_s`` (stopped by a hand, no restart
coming) is deleted as before, as is a halted VM of any other model at once (a spot or flex-start one is
recreated by its MIG, never restarted halted)."""

from __future__ import annotations

from datetime import timedelta

from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_manager_apply import Fixed
from tests.scaling.test_retired_vms import NOW, deletions
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Plan, Timing, VmPhase
from zen.scaling.port import FleetFacts, MigInstance

SILENCE_S = Timing().agent_silence_s


def _run(status: str, heard_s_ago: float, provisioning: str = "standard"):
    calls: list = []
    stopped = MigInstance("vm-a", "us-central1-a", "NONE", status, None)  # its MIG does nothing: GCE restarts it
    agents = {"vm-a": {"state": "STOPPING", "idle_since": None, "last_seen_at": NOW - timedelta(seconds=heard_s_ago)}}
    migs = {"us-central1": RecordingMig("us-central1", calls, 1, [stopped])}
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=4, regions=["us-central1"],
                           max_vms_per_region=1, max_vms=1, provisioning=[provisioning])
    m = ClusterManager(config, FakeFleet(FleetFacts((), {}, agents, {}, 0), NOW), migs, lambda: NOW, Timing(),
                       Fixed(Plan()))
    m.run()
    return deletions(calls), {vm.name: vm.phase for vm in m.policy.snapshots[0].vms}


def test_a_standard_vm_stopped_by_a_host_event_is_left_to_restart_under_its_name():
    for status in ("STOPPING", "TERMINATED"):
        deleted, phases = _run(status, heard_s_ago=5)
        assert deleted == [], (status, deleted)
        assert phases == {"vm-a": VmPhase.DELETING}  # no supply meanwhile: its new agent's word makes it so


def test_a_halted_standard_vm_whose_agent_stays_silent_and_any_other_halted_vm_are_deleted():
    assert _run("TERMINATED", heard_s_ago=SILENCE_S + 1)[0] == [("delete_instances", "us-central1", ["vm-a"])]
    assert _run("TERMINATED", heard_s_ago=5, provisioning="spot")[0] == [
        ("delete_instances", "us-central1", ["vm-a"])]
