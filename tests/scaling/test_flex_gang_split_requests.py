"""A gang in a flex-start pool got its VMs from two resize requests, each granted on its own.

docs/how-to/multi-node.md (Limits, Flex-start): "a gang's N VMs are one ask of N there, which
FlexStartMig.resize makes one resize request, granted all at once in one zone or not at all (never part of a
gang)". ``zen.scaling.gangs.ask`` counted a pending resize request left by another job as part of the gang
(its ``spare`` pools include the pending VMs no queued job took), and asked only for the rest: the gang's VMs
then came from two requests, granted apart. The first grant booted a VM (billed from RUNNING) that claimed a
part of the gang and waited for a grant that might never come; a single request of N bills nothing until the
gang can be whole.

Through the real ClusterManager, ZenPlanner and FlexStartMig against the Compute stand-in (its resize requests
granted whole in one zone)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.scaling.test_flex_start_mig import CarriedFleet
from zen.adapters.compute import compute_clients_from_env
from zen.adapters.flex_start import FlexStartMig, resize_requests_client_from_env
from zen.core.config import ZenConfig, load_config
from zen.scaling.manager import ClusterManager
from zen.scaling.model import DemandGroup, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.pricing import cluster_pools
from zen_dev.local.compute import ComputeStandIn, ManualClock

PROJECT, REGION = "test-proj", "us-central1"
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
ZONES = [f"{REGION}-a", f"{REGION}-b", f"{REGION}-c"]
CLUSTER = {"name": "flexonly", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4, "machine_type": "a2-highgpu-4g",
           "regions": [REGION], "max_vms_per_region": 8, "max_vms": 8, "provisioning": ["flex-start"],
           "max_start_wait_s": 3600}


def config() -> ZenConfig:
    return ZenConfig.model_validate({**load_config().model_dump(), "project": PROJECT, "clusters": [CLUSTER],
                                     "queues": []})


@pytest.fixture
def cloud(monkeypatch, tmp_path):
    # No capacity at first; after 5 minutes, room for one VM in one zone (a flex-start queue frees slowly).
    schedule = [{"at_s": 0, "zone": z, "capacity": 0} for z in ZONES] + [{"at_s": 300, "zone": ZONES[0], "capacity": 1}]
    scenario = {"project": PROJECT, "seed": 1,
                "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0},
                "capacity": {"schedule": schedule}}
    standin = ComputeStandIn(scenario, config=config(), clock=ManualClock(), log_dir=tmp_path).start()
    monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
    cluster = config().clusters[0]
    flex = FlexStartMig(PROJECT, REGION, cluster.mig_name(REGION, "flex-start"), *compute_clients_from_env(),
                        resize_requests_client_from_env(), run_s=cluster.flex_start_run_s,
                        now=lambda: datetime.fromisoformat(standin.world.ts.at(standin.world.now)))
    yield standin, flex, cluster
    standin.stop()


def requests_of(standin, flex):
    return standin.world.resize_requests.of(next(m for m in standin.world.migs.values() if m.name == flex.name))


def test_a_gang_in_a_flex_start_pool_is_asked_as_one_resize_request(cloud):
    standin, flex, cluster = cloud
    pools = cluster_pools(cluster)
    [pool] = pools
    now = [NOW]
    fleet = CarriedFleet((DemandGroup((pool,), 1, NOW),))  # a one-node job: a request of 1
    manager = ClusterManager(cluster, fleet, {pool: flex}, lambda: now[0], Timing(), ZenPlanner(), telemetry=False,
                             pools=pools, concurrent=False)
    manager.run()
    assert [(r.resize_by, r.state) for r in requests_of(standin, flex)] == [(1, "ACCEPTED")]
    # That job went (started on a VM freed meanwhile, or cancelled); a gang of 2 is queued in the pool.
    now[0] += timedelta(minutes=1)
    standin.advance(60)
    fleet.demand = (DemandGroup((pool,), 2, now[0], gang=2),)
    manager.run()
    queued = sorted(r.resize_by for r in requests_of(standin, flex) if r.state == "ACCEPTED")

    # Capacity for one VM comes: a request of 1 is granted, its VM boots and is billed, the gang cannot start.
    for _ in range(6):
        now[0] += timedelta(minutes=1)
        standin.advance(60)
        manager.run()
    state = flex.read()
    billed = [i.name for i in state.instances if i.billed]
    assert 2 in queued, (
        f"the gang's 2 VMs were asked as resize requests of {queued} (one left by another job counted as part of "
        f"the gang), granted apart: {len(billed)} VM(s) billed now ({billed}) while the gang cannot be whole")
