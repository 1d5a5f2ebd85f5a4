"""A gang past its start bound whose other pool is out (spot stocked out, nothing granted): ``gangs.match``
counts none of its queued flex-start request (``late``), and ``gangs.ask`` counted none either, so flex-start,
the one pool left, was asked a new request of the whole gang every pass (three requests of 2 in 25 passes). The
one-node job of tests/scaling/test_flex_start_mig.py's
test_a_late_job_whose_other_pool_is_out_keeps_its_one_request keeps its one request (flexrun.claim_queued); a gang
asking in that pool all the same takes its own queued request now."""

from __future__ import annotations

from datetime import timedelta

from tests.scaling.test_flex_start_mig import NOW, PROJECT, REGION, CarriedFleet, cloud, requests_of  # noqa: F401
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.scaling.manager import ClusterManager
from zen.scaling.model import DemandGroup, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.pricing import cluster_pools


def test_a_late_gang_whose_other_pool_is_out_keeps_its_one_request(cloud):
    standin, flex, cluster = cloud(capacity=0)
    pools = cluster_pools(cluster)
    spot, flex_pool = (next(p for p in pools if pools[p].model == m) for m in ("spot", "flex-start"))
    spot_mig = MigManager(PROJECT, REGION, cluster.mig_name(REGION, "spot"), *compute_clients_from_env())
    now = [NOW]
    fleet = CarriedFleet((DemandGroup((spot, flex_pool), 2, NOW, gang=2),))
    manager = ClusterManager(cluster, fleet, {spot: spot_mig, flex_pool: flex}, lambda: now[0], Timing(), ZenPlanner(),
                             telemetry=False, pools={p: pools[p] for p in (spot, flex_pool)}, concurrent=False)
    made: set[str] = set()
    for _ in range(25):
        manager.run()
        made |= {r.name for r in requests_of(standin, flex)}
        now[0] += timedelta(minutes=1)
        standin.advance(60)
    assert Timing().max_start_wait_s < 25 * 60
    queued = [r.resize_by for r in requests_of(standin, flex) if r.state == "ACCEPTED"]
    assert len(made) <= 2 and sum(queued) <= 2, (len(made), queued)
