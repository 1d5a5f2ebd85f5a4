"""The planner ranks a demand group by its oldest job's wait (``Ranking.patient``): the jobs past their start bound are
a group apart from those within it (``late`` in zen.store's queued_demand). Counted with an older job past the bound,
a job submitted now was ranked "fastest first (past its start bound)" with it, and put on the costlier model at
once, though it had waited seconds of its own max_start_wait_s.

Cluster [standard, spot] (standard the primary, as tests/test_explain_job_quota_pools.py sets it), one region's
two pools equally fast, spot $1.20/h, standard $3.67/h. Demand read from the real database (FleetDb.facts), planned
by ZenPlanner."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.messages import job_request
from zen.core.config import ZenConfig
from zen.scaling.fleetdb import FleetDb
from zen.scaling.model import ClusterLimits, ClusterSnapshot, Pool, RegionMemory, Timing
from zen.scaling.planner import ZenPlanner

CLUSTER = "4xa100-40gb"
STD, SPOT = "us-central1", "us-central1/spot"
POOLS = {STD: Pool("us-central1", "standard", 3.67), SPOT: Pool("us-central1", "spot", 1.20)}


@pytest.fixture
def stack(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster.update(provisioning=["standard", "spot"], regions=["us-central1"], max_start_wait_s=600)
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def _plan(zen, clock):
    cluster = zen.config.cluster(CLUSTER)
    demand = FleetDb(zen.db, {CLUSTER: cluster}).facts(CLUSTER, clock()).demand
    memory = {p: RegionMemory(last_boot_at=clock() - timedelta(seconds=60)) for p in POOLS}
    snapshot = ClusterSnapshot(now=clock(), cluster=ClusterLimits(CLUSTER, tuple(POOLS), 8, 8, pools=POOLS),
                               queued=(), vms=(), target_sizes={p: 0 for p in POOLS}, memory=memory,
                               timing=Timing(spare_boots=False, hedge_risk=0.5, max_start_wait_s=600), demand=demand)
    return demand, ZenPlanner().plan(snapshot)


def test_a_new_job_is_not_moved_to_standard_because_an_older_sibling_passed_its_bound(stack, clock):
    zen, functions = stack
    functions.submit(job_request("fresh-alone", cluster=CLUSTER, max_start_wait_s=600))
    _, alone = _plan(zen, clock)
    assert alone.add == {SPOT: 1}, alone.add  # within its bound: the cheaper, equally fast spot pool

    clock.advance(700)  # the first job has now waited past its 600 s bound (e.g. held by max_vms)
    functions.submit(job_request("fresh", cluster=CLUSTER, max_start_wait_s=600))  # waited 0 s of its 600 s
    demand, plan = _plan(zen, clock)
    assert sorted(g.count for g in demand) == [1, 1], demand  # the same pools and bound, one past it
    # The old job may fall back to standard; the fresh one has 600 s left and still gets spot.
    assert plan.add.get(SPOT, 0) >= 1 and plan.add.get(STD, 0) <= 1, (
        f"a job submitted 0 s ago was asked a standard VM ({plan.add}); reasons: "
        f"{[d.reason for d in plan.decisions]}")


def test_past_the_bound_the_cheaper_of_two_equally_fast_pools_is_asked(stack, clock):
    """Past its bound the group ranks by expected seconds, ties by price: the cheaper spot pool, as fast as standard,
    is asked (ties went by the cluster's order, standard first here, and the ADD's reason called spot "slower")."""
    zen, functions = stack
    functions.submit(job_request("late", cluster=CLUSTER, max_start_wait_s=600))
    clock.advance(700)
    _, plan = _plan(zen, clock)
    [add] = [d for d in plan.decisions if d.action.value == "ADD"]
    assert add.region == SPOT, add
    assert "slower" not in add.reason and "fastest first (past its start bound)" in add.reason, add.reason
