"""A Compute call that fails with something other than google.api_core's errors (a connection reset or
read timeout, raised by the REST transport as ``requests`` errors; a credentials refresh error; a later
page of a pager, fetched while iterating it; a reply that does not parse) is a ``MigApiError`` like any
other: that MIG is left alone for the pass, and the tick still scales every cluster. Nor does the
pass that could not read a MIG save the planner's memory of that region."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
import requests

from tests.messages import job_request
from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_scaling_integration import CLUSTER, stack  # noqa: F401 - the fixture
from zen.adapters.compute import MigManager
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Action, DemandGroup, RegionMemory, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigApiError, MigInstance, MigRateLimited

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


class Pages:
    """A pager whose first page is fine and whose next page fails (fetched while iterating)."""

    def __init__(self, first: list, error: Exception):
        self._first, self._error = first, error

    def __iter__(self):
        yield from self._first
        raise self._error


class Client:
    """A RegionInstanceGroupManagersClient whose calls fail as told."""

    def __init__(self, **failures):
        self.failures = failures

    def _maybe_fail(self, name):
        if isinstance(self.failures.get(name), Exception):
            raise self.failures[name]
        return self.failures.get(name)

    def get(self, **request):
        self._maybe_fail("get")
        return SimpleNamespace(target_size=1)

    def list_managed_instances(self, **request):
        return self._maybe_fail("list_managed_instances") or []

    def list_errors(self, **request):
        return self._maybe_fail("list_errors") or []

    def list(self, **request):
        return self._maybe_fail("list") or []


def item(name: str):
    return SimpleNamespace(name=name, instance=f"zones/us-central1-a/instances/{name}", current_action="CREATING",
                           instance_status="", last_attempt=None)


@pytest.mark.parametrize("failures", [
    {"get": requests.exceptions.ConnectionError("Connection reset by peer")},
    {"get": requests.exceptions.ReadTimeout("read timed out")},
    {"get": RuntimeError("credentials refresh failed")},
    {"list_managed_instances": Pages([item("a")], requests.exceptions.ConnectionError("reset on page 2"))},
    {"list_errors": Pages([], RuntimeError("503 on page 2"))},
    {"list_errors": [SimpleNamespace(timestamp="not a time", instance_action_details=None,
                                     error=SimpleNamespace(code="STOCKOUT"))]},
])
def test_any_failure_of_a_read_is_a_mig_api_error(failures):
    mig = MigManager("p", "us-central1", "zen-c-us-central1", Client(**failures), operations=None)
    with pytest.raises(MigApiError):
        mig.read()


def test_a_failed_listing_of_a_region_is_a_mig_api_error():
    mig = MigManager("p", "us-central1", "zen-c-us-central1",
                     Client(list=Pages([], requests.exceptions.ConnectionError("reset"))), operations=None)
    with pytest.raises(MigApiError):
        mig.region_summaries()


def test_a_transport_error_in_one_region_fails_no_cluster_s_tick(stack, monkeypatch):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    scaler, zen.scaler = zen.scaler, None  # submissions without their own pass
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a", cluster="8xa100-40gb", regions=["us-west1"]))
    fn.submit(job_request("b", regions=["us-west1"]))
    zen.scaler = scaler
    real_summaries, real_read = MigManager.region_summaries, MigManager.read

    def summaries(self):
        if self.region == "europe-west4":
            raise requests.exceptions.ConnectionError("Connection reset by peer")
        return real_summaries(self)

    def read(self, since=None, summary=None):
        if self.region == "europe-west4":
            raise requests.exceptions.ReadTimeout("read timed out")  # as an adapter that lets one through
        return real_read(self, since, summary)

    monkeypatch.setattr(MigManager, "region_summaries", summaries)
    monkeypatch.setattr(MigManager, "read", read)
    zen.on_scale_tick()
    assert len(instances("us-west1")) == 1  # b's VM (4xa100-40gb); europe-west4 left alone
    reports = zen.scaler.tick()
    assert any("europe-west4" in error for error in reports[CLUSTER].errors)


class MemFleet(FakeFleet):
    """A fleet that keeps the planner's memory as ``scaling_memory`` does (regions not given keep theirs)."""

    def __init__(self, facts: FleetFacts, first_seen: datetime, memory: dict[str, RegionMemory]):
        super().__init__(facts, first_seen)
        self.memory_kept = dict(memory)

    def facts(self, cluster, since):
        return replace(self._facts, memory=dict(self.memory_kept))

    def record(self, cluster, memory, decisions, now, planned=()):
        self.memory_kept.update(memory)
        super().record(cluster, memory, decisions, now, planned)


class FlakyMig(RecordingMig):
    fail = False

    def read(self, since=None, summary=None):
        if self.fail:
            raise MigRateLimited("429 rateLimitExceeded")
        return super().read(since, summary)


def test_one_failed_read_keeps_a_region_s_stockout_block():
    """The pass whose read failed saw no VMs in the region: had it saved the region's memory (known and
    booting empty), the next pass would take the old busy VM there for a fresh boot and unblock it."""
    calls: list = []
    regions = ["us-central1", "us-west1"]
    busy = MigInstance("busy-1", "us-central1-a", "NONE", "RUNNING", None)  # an old VM running a job
    central = FlakyMig("us-central1", calls, 1, [busy])
    migs = {"us-central1": central, "us-west1": RecordingMig("us-west1", calls)}
    blocked = RegionMemory(blocked_until=NOW + timedelta(minutes=15), strikes=3, last_stockout_at=NOW,
                           known=("busy-1",))
    facts = FleetFacts((DemandGroup(tuple(regions), 1, NOW),), {"busy-1": "job-x"},
                       {"busy-1": {"state": "BUSY", "idle_since": None, "last_seen_at": NOW}}, {}, 0)
    fleet = MemFleet(facts, NOW - timedelta(hours=2), {"us-central1": blocked})
    t = [NOW]
    m = ClusterManager(ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=regions,
                                     max_vms_per_region=4, max_vms=8), fleet, migs, lambda: t[0], Timing(),
                       ZenPlanner(), telemetry=False)
    central.fail = True
    assert m.run().errors
    assert "us-central1" not in fleet.recorded[-1][0]  # its memory left as stored
    central.fail = False
    t[0] += timedelta(minutes=1)
    report = m.run()
    assert not [d for d in report.decisions if d.action is Action.UNBLOCK]
    assert fleet.memory_kept["us-central1"].strikes == 3
    assert fleet.memory_kept["us-central1"].blocked_until == blocked.blocked_until
