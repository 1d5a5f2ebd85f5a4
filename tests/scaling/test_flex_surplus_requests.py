"""Three one-node jobs ask three flex-start requests (one each); two of the jobs are cancelled while the requests
queue. A request no queued job needs any more is cancelled at the next pass (docs/explanations/scaling.md), also
while another job still wants its pool: kept, all three were granted and two VMs booted for nobody, billed idle.
Driven through ClusterManager + FlexStartMig against the Compute stand-in (official client)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.scaling.test_flex_start_mig import CarriedFleet, PROJECT, REGION, ZONES, config, requests_of
from zen.adapters.compute import compute_clients_from_env
from zen.adapters.flex_start import FlexStartMig, resize_requests_client_from_env
from zen.scaling.manager import ClusterManager
from zen.scaling.model import DemandGroup, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.pricing import cluster_pools
from zen_dev.local.compute import ComputeStandIn, ManualClock

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


@pytest.fixture
def late_capacity(monkeypatch, tmp_path):
    """No capacity for the first 10 minutes, then 10 VMs a zone."""
    scenario = {"project": PROJECT, "seed": 1,
                "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0},
                "capacity": {"schedule": [{"at_s": at, "zone": z, "capacity": c}
                                          for z in ZONES for at, c in ((0, 0), (600, 10))]}}
    standin = ComputeStandIn(scenario, config=config(), clock=ManualClock(), log_dir=tmp_path).start()
    monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
    cluster = config().clusters[0]
    flex = FlexStartMig(PROJECT, REGION, cluster.mig_name(REGION, "flex-start"), *compute_clients_from_env(),
                        resize_requests_client_from_env(), run_s=cluster.flex_start_run_s,
                        now=lambda: datetime.fromisoformat(standin.world.ts.at(standin.world.now)))
    yield standin, flex, cluster
    standin.stop()


def test_requests_of_cancelled_jobs_are_cancelled_while_another_job_still_wants_the_pool(late_capacity):
    standin, flex, cluster = late_capacity
    [pool] = [p for p in cluster_pools(cluster) if p.endswith("flex-start")]
    now = [NOW]
    fleet = CarriedFleet((DemandGroup((pool,), 3, NOW),))
    manager = ClusterManager(cluster, fleet, {pool: flex}, lambda: now[0], Timing(), ZenPlanner(), telemetry=False,
                             pools={pool: cluster_pools(cluster)[pool]}, concurrent=False)

    def minute():
        report = manager.run()
        now[0] += timedelta(minutes=1)
        standin.advance(60)
        return report

    minute()
    assert sorted(r.resize_by for r in requests_of(standin, flex) if r.state == "ACCEPTED") == [1, 1, 1]
    fleet.demand = (DemandGroup((pool,), 1, NOW),)  # two of the three jobs cancelled
    reports = [minute() for _ in range(3)]
    queued = [r.name for r in requests_of(standin, flex) if r.state == "ACCEPTED"]
    for _ in range(8):  # capacity comes at 10 minutes
        reports.append(minute())
    granted = [r.name for r in requests_of(standin, flex) if r.state == "SUCCEEDED"]
    said = [(d.action.value, d.reason) for r in reports[:3] for d in r.decisions]
    vms = [i.name for i in flex.read().instances]
    assert len(queued) == 1 and len(granted) <= 1, (queued, granted, vms, said)
