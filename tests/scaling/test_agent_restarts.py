"""An idle VM whose agent restarts: once (a crash, systemd's restart 5 s later; a host maintenance), or on every start
(a fault each start meets). It says STOPPING as it dies and IDLE once back; its STOPPING keeps the VM's idle time
(``upsert_vm``: tests/test_idle_since_across_restarts.py). One restart of a VM ``min_vms`` keeps is no reason to
delete it, whatever the pass reads; a VM restarting without end is scaled down as any idle VM when a pass reads its
IDLE (its idle time counted from each restart, it never reached the keep and was billed for ever)."""

from __future__ import annotations

from datetime import timedelta

from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_retired_vms import NOW, deletions, instance
from tests.test_heartbeat_seq import ms, vm_beat, vm_row
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts


def _pass(state: str, min_vms: int) -> tuple[list, list[str]]:
    calls: list = []
    agents = {"vm-b": {"state": state, "idle_since": NOW - timedelta(seconds=3600), "last_seen_at": NOW}}
    migs = {"us-central1": RecordingMig("us-central1", calls, 1, [instance("vm-b")]),
            "us-west1": RecordingMig("us-west1", calls)}
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=4, regions=["us-central1", "us-west1"],
                           max_vms_per_region=4, max_vms=4, min_vms=min_vms)
    report = ClusterManager(config, FakeFleet(FleetFacts((), {}, agents, {}, 0), NOW), migs, lambda: NOW, Timing(),
                            ZenPlanner(), telemetry=False).run()
    return deletions(calls), [d.reason for d in report.decisions]


def test_one_agent_restart_of_a_warm_idle_vm_does_not_delete_it(functions, zen, clock):
    functions.heartbeat(vm_beat("IDLE", ms(clock), clock()))
    clock.advance(3600)  # idle an hour: the cluster's min_vms keeps it warm
    functions.heartbeat(vm_beat("STOPPING", ms(clock), clock()))  # its agent restarts, once
    row = vm_row(zen, "vm-b")
    assert row["state"] == "STOPPING" and row["idle_since"] == clock() - timedelta(seconds=3600)
    for state in ("STOPPING", "IDLE"):  # whichever word the pass reads
        deleted, why = _pass(state, min_vms=1)
        assert deleted == [], why


def test_a_vm_restarting_without_end_is_scaled_down_as_idle_since_before_its_restarts():
    deleted, why = _pass("IDLE", min_vms=0)  # idle_since an hour ago, heard a moment ago
    assert deleted == [("delete_instances", "us-central1", ["vm-b"])]
    assert [w for w in why if w.startswith("idle for 3600s and not needed")], why
