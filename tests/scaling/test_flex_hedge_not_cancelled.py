"""A one-VM job's hedge goes to no flex-start pool. A request no queued job needs is cancelled at the next pass
(``releasing.losers``), and a hedge is a VM the job does not need while its first choice is on the way: a hedge
request in another region's flex-start pool was inserted, then cancelled a minute later, never granted, for every
job whose first choice was uncertain (a flex-start pool never is certain before its first grant). Through the
Compute stand-in and the official client, two regions' flex-start pools."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tests.scaling.test_flex_start_mig import CarriedFleet
from zen.adapters.compute import compute_clients_from_env
from zen.adapters.flex_start import FlexStartMig, resize_requests_client_from_env
from zen.core.config import ZenConfig, load_config
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Action, DemandGroup, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.pricing import cluster_pools
from zen_dev.local.compute import ComputeStandIn, ManualClock

PROJECT, FIRST, OTHER = "test-proj", "us-central1", "us-east1"
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
CLUSTER = {"name": "4xa100", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4, "machine_type": "a2-highgpu-4g",
           "regions": [FIRST, OTHER], "max_vms_per_region": 8, "max_vms": 8, "provisioning": ["flex-start"]}


def config() -> ZenConfig:
    return ZenConfig.model_validate({**load_config().model_dump(), "project": PROJECT, "clusters": [CLUSTER],
                                     "queues": []})


def test_a_one_vm_jobs_first_flex_start_request_is_not_hedged_by_a_request_cancelled_a_pass_later(monkeypatch,
                                                                                                   tmp_path):
    schedule = [{"at_s": 0, "zone": f"{region}-{z}", "capacity": 0} for region in (FIRST, OTHER) for z in "abc"]
    scenario = {"project": PROJECT, "seed": 1, "capacity": {"schedule": schedule},
                "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0}}
    standin = ComputeStandIn(scenario, config=config(), clock=ManualClock(), log_dir=tmp_path).start()
    try:
        monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
        cluster = config().clusters[0]
        pools = cluster_pools(cluster)
        migs = {pool: FlexStartMig(PROJECT, pool, cluster.mig_name(pool, "flex-start"), *compute_clients_from_env(),
                                   resize_requests_client_from_env(), run_s=cluster.flex_start_run_s)
                for pool in pools}  # (each region's pool is its primary MIG: the cluster has one model)
        now = [NOW]
        manager = ClusterManager(cluster, CarriedFleet((DemandGroup(tuple(pools), 1, NOW),)), migs, lambda: now[0],
                                 Timing(), ZenPlanner(), telemetry=False, pools=pools, concurrent=False)
        decisions = []
        for _ in range(5):  # nothing granted meanwhile: the job's request waits in the queue
            decisions += manager.run().decisions
            now[0] += timedelta(seconds=60)
            standin.advance(60)
        requests = {region: [(q.name, q.state) for q in standin.world.resize_requests.of(mig)]
                    for mig in standin.world.migs.values() for region in [mig.spec.region]}
        assert [d.region for d in decisions if d.action is Action.ADD] == [FIRST]
        assert not [d for d in decisions if d.action is Action.DELETE]
        assert [state for made in requests.values() for _, state in made] == ["ACCEPTED"]
    finally:
        standin.stop()
