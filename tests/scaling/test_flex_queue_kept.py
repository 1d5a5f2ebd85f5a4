"""Three one-node jobs in a flex-start pool whose queue is slower than the pool's deadline (2 x
``flex_start_estimate_s``, 30 minutes). Each job's VM is a resize request of its own (``resize_requests``): at
the deadline the planner kept the oldest request as the pool's probe and cancelled the two others ("not needed
as a probe"); the pool stayed blocked while its probe waited, so nothing was asked for the two jobs until the
probe's request was granted, and they then queued again from the back. Every request still queued is kept
while jobs want the pool (``zen.scaling.probes.pruned``). Through the Compute stand-in and the official client
(FlexStartMig), with ``ClusterManager`` and the planner."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.scaling.test_flex_requests import Fleet
from zen.adapters.compute import compute_clients_from_env
from zen.adapters.flex_start import FlexStartMig, request_of, resize_requests_client_from_env
from zen.core.config import ZenConfig, load_config
from zen.scaling.manager import ClusterManager
from zen.scaling.model import DemandGroup, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts
from zen.scaling.pricing import cluster_pools
from zen_dev.local.compute import ComputeStandIn, ManualClock

PROJECT, REGION = "test-proj", "us-central1"
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
ZONES = [f"{REGION}-a", f"{REGION}-b", f"{REGION}-c"]
CLUSTER = {"name": "flex", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4, "machine_type": "a2-highgpu-4g",
           "regions": [REGION], "max_vms_per_region": 8, "max_vms": 8, "provisioning": ["flex-start"]}


def config() -> ZenConfig:
    return ZenConfig.model_validate({**load_config().model_dump(), "project": PROJECT, "clusters": [CLUSTER],
                                     "queues": []})


@pytest.fixture
def cloud(monkeypatch, tmp_path):
    # No capacity for the first hour, then room for all three VMs in each zone.
    scenario = {"project": PROJECT, "seed": 1,
                "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0},
                "capacity": {"schedule": [{"at_s": 0, "zone": z, "capacity": 0} for z in ZONES]
                             + [{"at_s": 3600, "zone": z, "capacity": 3} for z in ZONES]}}
    standin = ComputeStandIn(scenario, config=config(), clock=ManualClock(), log_dir=tmp_path).start()
    monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
    yield standin
    standin.stop()


def test_one_node_jobs_flex_requests_are_not_cancelled_while_they_wait_in_the_queue(cloud):
    standin = cloud
    cluster = config().clusters[0]
    pools = cluster_pools(cluster)
    [key] = pools
    flex = FlexStartMig(PROJECT, REGION, cluster.mig_name(REGION, "flex-start"), *compute_clients_from_env(),
                        resize_requests_client_from_env(), run_s=cluster.flex_start_run_s,
                        now=lambda: datetime.fromisoformat(standin.world.ts.at(standin.world.now)))
    t = [NOW]
    demand = (DemandGroup((key,), 3, NOW),)  # three one-node jobs that accept flex-start VMs
    fleet = Fleet(FleetFacts(demand, {}, {}, {}, 0), NOW)
    manager = ClusterManager(cluster, fleet, {key: flex}, lambda: t[0], Timing(), ZenPlanner(), telemetry=False,
                             pools=pools)
    cancelled = []
    for _ in range(59):  # a pass a minute while the queue holds every request
        report = manager.run()
        cancelled += [name for name in report.deleted if request_of(name)]
        fleet._facts = FleetFacts(demand, {}, {}, fleet.recorded[-1][0], 0)
        t[0] += timedelta(minutes=1)
        standin.advance(60)
    queued = {name: count for name, count in flex.pending().items()}
    assert not cancelled and sum(queued.values()) == 3, (cancelled, queued)
    for _ in range(4):  # capacity comes back at 60 minutes: every job's request is granted at once
        manager.run()
        fleet._facts = FleetFacts(demand, {}, {}, fleet.recorded[-1][0], 0)
        t[0] += timedelta(minutes=1)
        standin.advance(60)
    assert sum(flex.pending().values()) == 0
    assert len([i for i in flex.read().instances if not request_of(i.name)]) == 3
