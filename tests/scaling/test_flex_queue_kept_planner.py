"""Flex-start requests past their pool's deadline kept for jobs that can go nowhere else (``flexrun.queue_kept``,
``probes.pruned``): whole requests, a gang's one that holds it, the groups with the fewest pools first, and none
beyond the probe while they would hold places other demand needs under ``max_vms``. Through ZenPlanner.plan, pass
after pass (deletions applied, memory carried), as tests/scaling/test_flex_gang_past_bound.py drives it."""

from __future__ import annotations

from dataclasses import replace

from tests.scaling.test_planner import at, snap
from zen.scaling.model import ClusterLimits, DemandGroup, Pool, RegionMemory, Timing, Vm, VmPhase
from zen.scaling.planner import ZenPlanner

NOW = 2400  # past a flex-start pool's deadline (2 x flex_start_estimate_s) for requests asked at 0..100 s


def blocked() -> RegionMemory:  # struck when its requests went past the deadline
    return RegionMemory(strikes=1, last_stockout_at=at(NOW - 60), blocked_until=at(NOW + 120))


def request(pool: str, name: str, since: float, n: int = 1) -> tuple[Vm, ...]:
    mig = "zen-c-" + pool.replace("/", "-")
    return tuple(Vm(f"{mig}+{name}+{i}", pool, VmPhase.BOOTING, at(since)) for i in range(n))


def passes(pools, memory, vms, demand, n=5, max_vms=8):
    """Up to ``n`` passes a minute apart, each plan's deletions applied; yields each plan."""
    limits, now, vms = ClusterLimits("c", tuple(pools), 8, max_vms, pools=pools), NOW, list(vms)
    for _ in range(n):
        plan = ZenPlanner().plan(replace(snap(now, vms=vms, memory=memory, timing=Timing(), limits=limits),
                                         demand=demand))
        yield plan
        gone = {name for _, name in plan.delete}
        vms, memory, now = [vm for vm in vms if vm.name not in gone], plan.memory, now + 60


def test_a_gang_at_max_vms_is_not_held_for_ever_by_the_queued_requests_kept_for_other_jobs():
    """Seven flex-only one-node jobs' requests queued past the deadline fill 7 of max_vms' 8 places. A gang of two
    (priority 5) on the standard pool needs 2. Kept, they held the gang (a gang held by max_vms makes no probe give
    way: ``at_limit`` counts one-node jobs) until Compute granted the flex-start queue: all but the probe go."""
    std, flex = "us-central1", "us-central1/flex-start"
    pools = {std: Pool("us-central1", "standard", 5.92), flex: Pool("us-central1", "flex-start", 3.26)}
    memory = {std: RegionMemory(last_boot_at=at(-60)), flex: blocked()}
    vms = [vm for i in range(7) for vm in request(flex, f"r{i}", i)]
    demand = (DemandGroup((flex,), 7, at(0)), DemandGroup((std,), 2, at(NOW - 30), priority=5, gang=2))
    asked = [plan.add.get(std, 0) for plan in passes(pools, memory, vms, demand)]
    assert any(n >= 2 for n in asked), (
        f"the gang was never asked for in 5 passes ({asked}): the flex-start requests kept past the deadline hold "
        "max_vms' places, and a gang the limit holds makes none give way")


def test_a_flex_only_gangs_own_request_is_kept_not_the_requests_of_jobs_that_went_elsewhere():
    """A one-node group allowing spot and flex-start (its two requests queued in flex-start, older) and a gang of
    two allowing flex-start only (its request of 2, newer). Spot has capacity: the one-node jobs go there, and
    the requests beyond what the gang needs go; the gang can go nowhere else, and a request that holds it is kept
    (counted by VMs, the two oldest were kept: the requests of 1, which cannot hold it, ``Queued.for_gang``)."""
    spot, flex = "us-central1", "us-central1/flex-start"
    pools = {spot: Pool("us-central1", "spot", 2.0), flex: Pool("us-central1", "flex-start", 3.26)}
    memory = {spot: RegionMemory(last_boot_at=at(-60)), flex: blocked()}
    vms = request(flex, "r1", 0) + request(flex, "r2", 0) + request(flex, "g", 100, n=2)
    demand = (DemandGroup((spot, flex), 2, at(0)), DemandGroup((flex,), 2, at(50), gang=2))
    plan = next(passes(pools, memory, vms, demand))
    assert plan.add.get(spot, 0) >= 2  # the one-node jobs are asked spot VMs
    cancelled = sorted(name.rpartition("+")[0].rpartition("+")[2] for _, name in plan.delete)
    assert "g" not in cancelled, (
        f"requests cancelled: {cancelled}; the gang's own request (its place in the queue) is cancelled while "
        "the requests of the jobs asked spot VMs are kept")
    assert cancelled == ["r1", "r2"], cancelled  # beyond what the gang needs: their jobs went to spot


def test_requests_of_jobs_that_can_go_nowhere_else_are_all_kept_across_two_blocked_pools():
    """Two flex-start pools A and B, both past their deadline, two requests queued in each. Group 1 (priority 1)
    may take A or B, its requests in B; group 2 may take A only, its requests in A. Four jobs, every pool of theirs
    blocked, four requests: all are kept (group 1 counted first in its first pool, A, used up A's places, and one
    of B's requests was cancelled)."""
    a, b = "us-central1", "us-east1"
    pools = {a: Pool("us-central1", "flex-start", 3.26), b: Pool("us-east1", "flex-start", 3.26)}
    memory = {a: blocked(), b: blocked()}
    vms = request(a, "a1", 0) + request(a, "a2", 0) + request(b, "b1", 0) + request(b, "b2", 0)
    demand = (DemandGroup((a, b), 2, at(0), priority=1), DemandGroup((a,), 2, at(0)))
    plan = next(passes(pools, memory, vms, demand))
    assert plan.delete == [], f"cancelled {plan.delete}: four jobs that can go nowhere else, four requests"
