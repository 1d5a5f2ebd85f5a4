"""A flex-start gang is asked as one resize request, all its VMs at once (docs/how-to/multi-node.md, Limits:
"granted all at once in one zone or not at all (never part of a gang)"). When the limits at apply time leave
room for fewer VMs than the plan asked (two gangs of 2, room for 3), the second gang's unit no longer fits and is
asked none (its VMs were asked as a request of one: half of a gang, granted on its own, billed for nothing)."""

from __future__ import annotations

from tests.scaling.fakes import FakeFleet
from tests.scaling.test_flex_start_mig import NOW, PROJECT, REGION, cloud  # noqa: F401  (the fixture)
from tests.scaling.test_manager_apply import Fixed
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Action, Decision, Plan, Timing
from zen.scaling.port import FleetFacts
from zen.scaling.pricing import cluster_pools


def test_a_flex_start_gang_cut_by_the_limits_is_never_asked_in_part(cloud):  # noqa: F811
    standin, flex, cluster = cloud()
    cluster = cluster.model_copy(update={"max_vms": 3})
    pools = cluster_pools(cluster)
    [pool] = [key for key, p in pools.items() if p.model == "flex-start"]
    migs = {key: flex if key == pool else MigManager(PROJECT, REGION, cluster.mig_name(REGION, p.model),
                                                     *compute_clients_from_env())
            for key, p in pools.items()}
    plan = Plan(add={pool: 4}, together={pool: [2, 2]})  # two gangs of 2, as the planner asks them
    fleet = FakeFleet(FleetFacts((), {}, {}, {}, 0), NOW)
    ClusterManager(cluster, fleet, migs, lambda: NOW, Timing(), Fixed(plan), concurrent=False).run()
    requests = sorted(flex.pending().values())
    assert requests == [2], f"resize requests {requests}: a request of 1 holds half of the second gang"


def test_a_gang_cut_by_the_per_mig_limit_names_that_limit(cloud):  # noqa: F811
    """The limit that cut it is named, as the capped size before the gang was left out says (it named the cluster's)."""
    standin, flex, cluster = cloud()
    cluster = cluster.model_copy(update={"max_vms_per_region": 3, "max_vms": 50})
    pools = cluster_pools(cluster)
    [pool] = [key for key, p in pools.items() if p.model == "flex-start"]
    migs = {key: flex if key == pool else MigManager(PROJECT, REGION, cluster.mig_name(REGION, p.model),
                                                     *compute_clients_from_env())
            for key, p in pools.items()}
    plan = Plan(add={pool: 4}, together={pool: [2, 2]},
                decisions=[Decision(Action.ADD, pool, "4 VM(s) for 2 queued gang(s)", 4)])
    fleet = FakeFleet(FleetFacts((), {}, {}, {}, 0), NOW)
    report = ClusterManager(cluster, fleet, migs, lambda: NOW, Timing(), Fixed(plan), concurrent=False,
                            telemetry=False).run()
    assert sorted(flex.pending().values()) == [2]
    [add] = [d for d in report.decisions if d.region == pool and d.action is Action.ADD]
    assert "max_vms_per_region" in add.reason, add.reason
