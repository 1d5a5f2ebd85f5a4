"""A resize Compute accepted (it answered with an operation) may take effect whatever is said of its
operation afterwards (Compute: a resize is DONE once scheduled; regionOperations.wait gives "no guarantee
that the operation is actually done"). So it counts toward the cluster's ``max_vms`` even when its
outcome is unknown: counted as not added, the cluster went over its limit in the other regions. And each
write carries a ``requestId``, so that retrying it (a 5xx) changes nothing more. Through the Compute
stand-in and the official client, with ``ClusterManager``'s recording fleet."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.scaling.fakes import FakeFleet
from tests.scaling.test_manager_apply import Fixed
from zen.adapters.compute import MigApiError, MigManager, compute_clients_from_env
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Plan, Timing
from zen.scaling.port import FleetFacts
from zen_dev.local.compute import ComputeStandIn, ManualClock

PROJECT, REGIONS = "test-proj", ["us-central1", "us-west1"]
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


@pytest.fixture
def cloud(monkeypatch, tmp_path):
    started = []

    def make(bound_s: float | None = None, **extra):
        scenario = {"project": PROJECT, "seed": 1,
                    "migs": [{"name": f"zen-c-{r}", "region": r, "machine_type": "a2-highgpu-4g"} for r in REGIONS],
                    "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0}, **extra}
        standin = ComputeStandIn(scenario, clock=ManualClock(), log_dir=tmp_path).start()
        started.append(standin)
        monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
        clients = compute_clients_from_env()
        bound = {} if bound_s is None else {"call_bound_s": bound_s}
        return standin, {r: MigManager(PROJECT, r, f"zen-c-{r}", *clients, **bound) for r in REGIONS}

    yield make
    for standin in started:
        standin.stop()


def test_a_resize_whose_operation_could_not_be_read_counts_toward_the_cluster_limit(cloud):
    # Every operation is still RUNNING when read, and reading it fails (a 403 rate limit, as any error).
    standin, migs = cloud(api={"operation_delay_s": 30},
                          faults={"rate_limit": {"fraction": 1.0, "methods": ["operations.get", "operations.wait"]}})
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=4, regions=REGIONS,
                           max_vms_per_region=4, max_vms=4)
    fleet = FakeFleet(FleetFacts((), {}, {}, {}, 0), NOW)
    manager = ClusterManager(config, fleet, migs, lambda: NOW, Timing(), Fixed(Plan(add={r: 4 for r in REGIONS})),
                             telemetry=False, concurrent=False)
    report = manager.run()
    assert [m.target_size() for m in migs.values()] == [4, 0]  # not 4 and 4: twice the cluster's limit
    assert report.added == {"us-central1": 4} and not report.refused  # Compute took it: added, its pool not struck
    assert "cluster limit" in report.short["us-west1"]


def test_a_write_carries_a_request_id_and_a_retry_after_a_5xx_sends_the_same(cloud):
    standin, migs = cloud(1.0, faults={"unavailable": [{"region": "us-west1", "methods": ["resize"]}]})
    sent: list = []
    handle = standin.api.handle
    standin.api.handle = lambda method, path, query, body: sent.append((path, dict(query))) or \
        handle(method, path, query, body)
    migs["us-central1"].resize(2)
    [(_, query)] = [(path, query) for path, query in sent if path.endswith("/resize")]
    assert query["size"] == "2" and query.get("requestId")
    sent.clear()
    with pytest.raises(MigApiError):  # 503 answers for the whole bound
        migs["us-west1"].resize(1)
    resizes = [query for path, query in sent if path.endswith("/resize")]
    ids = {query.get("requestId") for query in resizes}
    assert len(resizes) >= 2 and len(ids) == 1 and None not in ids


def test_a_write_compute_refused_is_a_plain_failure_and_counts_toward_nothing(cloud):
    from zen.scaling.port import MigUnconfirmed

    standin, migs = cloud()
    with pytest.raises(MigApiError) as refused:  # 400: a size over 2000, a regional MIG's limit
        migs["us-central1"].resize(2001)
    assert not isinstance(refused.value, MigUnconfirmed) and migs["us-central1"].target_size() == 0
