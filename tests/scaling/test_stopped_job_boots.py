"""A job stopped (or started elsewhere) while the VMs asked for it wait for capacity (a stockout): a boot no
queued job may use went only once another VM became usable or was listed RUNNING. With none, it waited in its
MIG until capacity came back, maybe hours later, then booted, was billed for nobody, and was kept idle as the
price of a cold start. Without capacity yet, it goes at the first pass now (``ZenPlanner``'s cancel_losers), as
a flex-start request no queued job wants. One that got capacity (billed from RUNNING, within a minute or so)
is kept, as before: the next job may use it (deleting those measured slower starts in the simulator)."""

from __future__ import annotations

from datetime import datetime, timezone

from tests.scaling.fakes import FakeFleet, RecordingMig
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigInstance

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


def _pass(instances: list[MigInstance], min_vms: int = 0) -> list:
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=["us-central1", "us-west1"],
                           max_vms_per_region=4, max_vms=8, min_vms=min_vms)
    calls: list = []
    migs = {"us-central1": RecordingMig("us-central1", calls, len(instances), instances),
            "us-west1": RecordingMig("us-west1", calls, 0)}
    fleet = FakeFleet(FleetFacts((), {}, {}, {}, 0), NOW)  # nothing queued: the job was stopped
    ClusterManager(config, fleet, migs, lambda: NOW, Timing(), ZenPlanner(), telemetry=False).run()
    return [call for call in calls if call[0] == "delete_instances"]


def test_boots_no_queued_job_may_use_go_at_the_first_pass_while_they_wait_for_capacity():
    waiting = [MigInstance(f"zen-c-{i}", "us-central1-a", "CREATING", "", None) for i in (1, 2)]  # no capacity yet
    provisioning = MigInstance("zen-c-3", "us-central1-a", "CREATING", "PROVISIONING", None)  # capacity
    assert _pass([*waiting, provisioning]) == [("delete_instances", "us-central1", ["zen-c-1", "zen-c-2"])]
    assert _pass([MigInstance("zen-c-4", "us-central1-a", "CREATING", "RUNNING", None)]) == []  # billed: kept


def test_min_vms_keeps_its_boots():
    boots = [MigInstance(f"zen-c-{i}", "us-central1-a", "CREATING", "", None) for i in range(2)]
    assert _pass(boots, min_vms=2) == []
    [(_, _, deleted)] = _pass(boots, min_vms=1)
    assert len(deleted) == 1
