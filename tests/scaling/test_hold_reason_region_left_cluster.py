"""A queued job whose regions all left its cluster (the configuration changed while it waited: the region was
dropped) can never get a VM: the planner asks nowhere for it. Its HOLD decision (``zen explain CLUSTER``,
``scaling_decisions``) says "allowed regions' MIGs are at their limit (max_vms_per_region ...)", which is not
why: the cluster has room and the job's region is no longer the cluster's (``ZenPlanner._hold_reason`` finds
none of the group's pools among the cluster's and falls through to the per-MIG limit). An operator reading it
raises max_vms_per_region, to no effect."""

from __future__ import annotations

from tests.messages import job_request
from tests.scaling.test_scaling_integration import CLUSTER, stack  # noqa: F401 - the fixture
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.scaling.manager import ClusterOrchestrator
from zen.scaling.model import Action


def test_a_job_whose_region_left_the_cluster_is_not_held_for_the_per_mig_limit(stack, config, db, clock):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    scaler, zen.scaler = zen.scaler, None  # submitted while no pass runs (e.g. its pass was skipped)
    FunctionsInvoker(zen).submit(job_request("a", regions=["europe-west4"]))
    # The configuration drops europe-west4 from the cluster; the job stays QUEUED.
    clusters = [c.model_copy(update={"regions": [r for r in c.regions if r != "europe-west4"]})
                if c.name == CLUSTER else c for c in config.clusters]
    changed = config.model_copy(update={"clusters": clusters})
    clients = compute_clients_from_env()
    report = ClusterOrchestrator(changed, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients)).scale(CLUSTER)
    assert report.added == {}
    [held] = [d for d in report.decisions if d.action is Action.HOLD]
    assert "max_vms_per_region" not in held.reason, held.reason  # the cluster's MIGs are empty: no limit holds it
    assert "europe-west4" in held.reason, held.reason  # why: its only region is no longer the cluster's
