"""A spot pool's preemptions weigh on its rank for about ``trust_s`` (``scaling.stockout_memory_s``), asked or not.

A pool's learned preemptions (``zen.scaling.preemptions``) were decayed only when a pass saw its busy VMs change:
a spot pool that lost its VMs, and so ranked dearer than standard per useful hour, was asked for no more, kept no
busy VM, and its evidence never faded: two days on, every job still went to standard at 2.5x the spot price, and
``zen explain`` still priced spot "with its preemptions" as in the hour it lost them. Pure planner passes, one after
another, as the manager runs them.
"""

from __future__ import annotations

from zen.scaling.model import (
    ClusterLimits, ClusterSnapshot, Pool, QueuedJob, RegionMemory, Timing, Vm, VmPhase,
)
from zen.scaling.planner import ZenPlanner

from tests.scaling.test_planner import at

POOLS = {"us-central1": Pool("us-central1", "spot", 2.0), "us-central1/standard": Pool("us-central1", "standard", 5.0)}
LIMITS = ClusterLimits("8xa100", tuple(POOLS), max_vms_per_region=8, max_vms=8, pools=POOLS)


def snap(now: float, memory: dict[str, RegionMemory], vms: tuple[Vm, ...] = (), queued: int = 0) -> ClusterSnapshot:
    jobs = tuple(QueuedJob(f"q{i}", tuple(POOLS), at(now)) for i in range(queued))
    return ClusterSnapshot(now=at(now), cluster=LIMITS, queued=jobs, vms=vms,
                           target_sizes={p: sum(vm.region == p for vm in vms) for p in POOLS}, errors=(),
                           memory=memory, timing=Timing(hedge_risk=0.5), arrivals_last_hour=0)


def asked(plan) -> dict[str, int]:
    return {d.region: d.count for d in plan.decisions
            if d.action.value == "ADD" and "queued job(s) without a VM" in d.reason}


def test_a_spot_pool_no_longer_asked_for_comes_back_to_its_price():
    memory = {p: RegionMemory(last_boot_at=at(-60)) for p in POOLS}
    busy = tuple(Vm(f"s{i}", "us-central1", VmPhase.BUSY, at(0), job_id=f"j{i}") for i in range(4))
    memory = ZenPlanner().plan(snap(0, memory, busy)).memory
    taken = tuple(Vm(vm.name, vm.region, VmPhase.DELETING, at(1800)) for vm in busy)  # gone under their jobs
    memory = ZenPlanner().plan(snap(1800, memory, taken)).memory
    assert memory["us-central1"].preempted == 4
    first = ZenPlanner().plan(snap(1900, memory, queued=1))
    assert asked(first) == {"us-central1/standard": 1}  # spot's losses make it dearer per useful hour
    memory = first.memory
    for hour in range(1, 49):  # passes with nothing busy in spot: its VMs' busy set does not change
        memory = ZenPlanner().plan(snap(1900 + hour * 3600, memory)).memory
    later = ZenPlanner().plan(snap(1900 + 48 * 3600 + 60, memory, queued=1))
    assert asked(later) == {"us-central1": 1}, [d.reason for d in later.decisions]
    assert "with its preemptions" not in str([d.reason for d in later.decisions])
