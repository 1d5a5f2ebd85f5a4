"""A preempted spot VM (``instance_termination_action = DELETE``) is recreated by its MIG under the same
name, while its agent's last word stays STOPPING (``Agent._shut_down``). The agent's word counts only
while the instance runs: the instance being recreated is booting like any other (a probe, a strike,
deleted when stuck and unwanted), never a ghost that is counted against the limits forever."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.scaling.fakes import FakeFleet, RecordingMig
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Action, ErrorKind, Timing, VmPhase
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigInstance
from zen.scaling.vms import classify

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
REGIONS = ["us-central1", "us-west1"]
STOPPING = {"state": "STOPPING", "idle_since": None, "last_seen_at": NOW}


@pytest.mark.parametrize("action, status, phase", [
    ("NONE", "RUNNING", VmPhase.DELETING),  # shutting down: on its way out
    ("CREATING", "", VmPhase.BOOTING),  # recreated by its MIG, waiting for capacity
    ("RECREATING", "STAGING", VmPhase.BOOTING),
    ("NONE", "STAGING", VmPhase.BOOTING),
    ("DELETING", "STOPPING", VmPhase.DELETING),
])
def test_an_agent_s_stopping_counts_only_while_its_instance_runs(action, status, phase):
    instance = MigInstance("vm", "us-central1-a", action, status, None)
    assert classify(instance, "us-central1", NOW, {}, {"vm": STOPPING}).phase is phase


def test_a_preempted_vm_recreated_in_a_stockout_strikes_the_region_and_goes_when_unwanted():
    calls: list = []
    ghost = MigInstance("ghost", "us-central1-a", "CREATING", "", ErrorKind.STOCKOUT)  # the MIG re-creating it
    migs = {"us-central1": RecordingMig("us-central1", calls, 1, [ghost]), "us-west1": RecordingMig("us-west1", calls)}
    fleet = FakeFleet(FleetFacts((), {}, {"ghost": STOPPING}, {}, 0), NOW)  # its job finished elsewhere since
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=REGIONS,
                           max_vms_per_region=4, max_vms=1)
    t = [NOW]
    m = ClusterManager(config, fleet, migs, lambda: t[0], Timing(), ZenPlanner(), telemetry=False)
    decisions = []
    for _ in range(10):  # ten minutes of ticks
        decisions += m.run().decisions
        t[0] += timedelta(minutes=1)
    assert any(d.action is Action.BLOCK and d.region == "us-central1" for d in decisions)
    assert ("delete_instances", "us-central1", ["ghost"]) in calls  # stuck, and no demand wants a probe


def test_a_routine_preemption_of_a_day_old_spot_vm_does_not_strike_its_region():
    """Recreated without any error, its name first seen a day ago: its boot counts from its agent's
    last word, so it is not stuck at once, and its job (requeued) waits for it rather than spilling."""
    from zen.scaling.model import DemandGroup

    calls: list = []
    spot = MigInstance("spot", "us-central1-a", "RECREATING", "STAGING", None)
    migs = {"us-central1": RecordingMig("us-central1", calls, 1, [spot]), "us-west1": RecordingMig("us-west1", calls)}
    demand = (DemandGroup(tuple(REGIONS), 1, NOW - timedelta(seconds=20)),)
    said = {"spot": {**STOPPING, "last_seen_at": NOW - timedelta(seconds=30)}}
    fleet = FakeFleet(FleetFacts(demand, {}, said, {}, 0), NOW - timedelta(days=1))
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=REGIONS,
                           max_vms_per_region=4, max_vms=4)
    decisions = ClusterManager(config, fleet, migs, lambda: NOW, Timing(), ZenPlanner(), telemetry=False).run().decisions
    assert not any(d.action is Action.BLOCK for d in decisions), decisions
    assert classify(spot, "us-central1", NOW - timedelta(days=1), {}, said).since == NOW - timedelta(seconds=30)
