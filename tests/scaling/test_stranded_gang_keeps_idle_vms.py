"""A multi-node job whose cluster's limits were lowered below its nodes can never start (its claims are refused),
and is no demand: it reached the planner (``zen.scaling.fleetdb.demand_groups`` left out groups stranded by a
region or model gone, not gangs stranded by limits), which kept the idle VMs that "covered" it for ever: billed,
never scaled down, while every claim they made was refused."""

from __future__ import annotations

from dataclasses import replace

from tests.scaling.test_planner import at, snap, vm
from zen.scaling.fleetdb import demand_groups
from zen.scaling.model import ClusterLimits, VmPhase
from zen.scaling.planner import ZenPlanner

CLUSTER = "4xa100-40gb"  # the default configuration: max_vms 8, max_vms_per_region 4


def test_idle_vms_are_not_kept_for_a_gang_the_lowered_limits_strand(config):
    cluster = config.cluster(CLUSTER).model_copy(update={"max_vms_per_region": 2})  # lowered from 4
    assert cluster.nodes_problem(4) is not None  # its claims are refused (zen.jobs.claims)
    # queued_demand's row for the gang of 4 accepted before the change, nothing claimed yet
    row = {"priority": 0, "regions": ["us-west1"], "provisioning": None, "max_start_wait_s": None,
           "checkpoint_every_s": None, "jobs": 1, "oldest": at(0), "longest": None, "nodes": 4, "need": 4, "vms": 4}
    demand = demand_groups([row], cluster)
    # The four VMs us-west1 ran before the limit was lowered, idle for hours: nothing can use them.
    idle = [vm(f"w{i}", "us-west1", VmPhase.IDLE, since=0) for i in range(4)]
    limits = ClusterLimits(CLUSTER, tuple(cluster.regions), max_vms_per_region=2, max_vms=cluster.max_vms)
    plan = ZenPlanner().plan(replace(snap(10_000, vms=idle, limits=limits), demand=demand))
    assert plan.delete, (f"idle VMs kept for a gang whose claims are all refused: {demand}; "
                         f"{[d.reason for d in plan.decisions]}")
