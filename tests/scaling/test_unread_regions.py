"""A MIG that cannot be read (429, 5xx, not found) blocks adds in its own region only: it counts toward
the cluster's max_vms as its last known size, not as full, so the other regions keep their room, and
the reason given for jobs that wait is true."""

from __future__ import annotations

from datetime import datetime, timezone

from tests.scaling.fakes import FakeFleet, RecordingMig
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Action, DemandGroup, RegionMemory, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigApiError

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
BOTH = ("us-central1", "us-west1")


class Broken(RecordingMig):
    def read(self, since=None, summary=None):
        raise MigApiError("429 rateLimitExceeded")

    def target_size(self):
        raise MigApiError("429 rateLimitExceeded")


def run(demand, memory=None, max_vms=4):
    calls: list = []
    migs = {"us-central1": Broken("us-central1", calls), "us-west1": RecordingMig("us-west1", calls)}
    fleet = FakeFleet(FleetFacts(tuple(demand), {}, {}, dict(memory or {}), 0), NOW)
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=list(migs),
                           max_vms_per_region=4, max_vms=max_vms)
    report = ClusterManager(config, fleet, migs, lambda: NOW, Timing(), ZenPlanner(), telemetry=False).run()
    return report, [d for d in report.decisions if d.action is Action.HOLD], fleet


def test_an_unreadable_mig_takes_no_room_from_the_other_regions():
    report, holds, fleet = run([DemandGroup(BOTH, 1, NOW)])
    assert report.added == {"us-west1": 1} and not holds
    assert any("us-central1" in e for e in report.errors)
    assert "us-central1" not in fleet.recorded[-1][0]  # no memory of it kept (nor the block it was shown)


def test_it_counts_toward_the_cluster_limit_as_its_last_known_size():
    known = RegionMemory(known=("c-1", "c-2", "c-3"))  # the last pass that read it saw 3 VMs there
    report, holds, _ = run([DemandGroup(BOTH, 2, NOW)], {"us-central1": known})
    assert report.added == {"us-west1": 1}
    assert [h.reason for h in holds] == ["1 job(s) wait: cluster limit of 4 VMs reached"]


def test_a_job_that_allows_only_the_unread_region_waits_for_that_reason():
    report, holds, _ = run([DemandGroup(("us-central1",), 2, NOW)])
    assert not report.added
    [hold] = holds
    assert hold.count == 2 and "could not be read (us-central1)" in hold.reason and "limit" not in hold.reason
