"""A probe that waited out a stockout feeds its pool's boot time with its boot, not with the stockout.

The pool's learned boot time (``RegionMemory.boot_s``, ``ranking.learned_boot``) ranks it by expected seconds to a
usable VM; its stockout risk (``Ranking.risk``) weighs stockouts, and decays. A probe kept in a blocked pool
waits for capacity as long as the stockout lasts, and once it boots with no job left to take (its job started
elsewhere meanwhile, or every region's probe came up for fewer jobs), its time from the ask (two hours) went into
the moving average: the pool's boot read as 37 minutes, it ranked behind every other pool long after its risk
had faded, and, asked no more, it never learnt better. Counted from when a pass first saw it get capacity, its
wait is the risk's alone. Pure planner passes, one after another, as the manager runs them.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from zen.scaling.model import ClusterLimits, ClusterSnapshot, QueuedJob, RegionMemory, Timing, Vm, VmPhase
from zen.scaling.planner import ZenPlanner

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
REGIONS = ("us-central1", "us-west1")
LIMITS = ClusterLimits("4xa100-40gb", REGIONS, max_vms_per_region=4, max_vms=6)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def snap(now: float, memory: dict[str, RegionMemory], vms: tuple[Vm, ...] = (), queued: int = 0) -> ClusterSnapshot:
    jobs = tuple(QueuedJob(f"j{i}", REGIONS, at(now)) for i in range(queued))
    return ClusterSnapshot(now=at(now), cluster=LIMITS, queued=jobs, vms=vms,
                           target_sizes={r: sum(vm.region == r for vm in vms) for r in REGIONS},
                           errors=(), memory=memory, timing=Timing(hedge_risk=0.5), arrivals_last_hour=0)


def test_a_probe_that_waited_out_a_stockout_learns_its_boot_not_the_stockout():
    memory = {  # us-central1 booted in 100 s, then stocked out: blocked, its probe p1 asked at 0 and waiting since
        "us-central1": RegionMemory(boot_s=100.0, strikes=4, blocked_until=at(7200 + 900), last_boot_at=at(-600),
                                    last_stockout_at=at(6900), booting=("p1",), booting_since=(at(0).timestamp(),), known=("p1",)),
        "us-west1": RegionMemory(boot_s=100.0, last_boot_at=at(-600))}
    got = Vm("p1", "us-central1", VmPhase.BOOTING, at(0), started=True)  # capacity at last, two hours on
    plan = ZenPlanner().plan(snap(7100, memory, (got,)))
    assert plan.memory["us-central1"].started == ("p1",)
    booted = ZenPlanner().plan(snap(7190, plan.memory, (Vm("p1", "us-central1", VmPhase.IDLE, at(7180)),)))
    learned = booted.memory["us-central1"]
    assert learned.blocked_until is None  # it delivers again
    assert learned.boot_s == pytest.approx(0.7 * 100 + 0.3 * 80)  # capacity seen at 7100, usable at 7180

    # Four hours on, the stockout long faded and p1 gone: the preferred pool is asked again, as before it.
    later = ZenPlanner().plan(snap(7190 + 4 * 3600, booted.memory, queued=1))
    assert later.add == {"us-central1": 1}


def test_a_probe_that_got_capacity_and_booted_between_two_passes_is_not_learned():
    """No pass saw when it got capacity: its wait and its boot cannot be told apart, so neither is learnt."""
    memory = {"us-central1": RegionMemory(boot_s=100.0, strikes=4, blocked_until=at(7200 + 900),
                                          last_stockout_at=at(6900), booting=("p1",), booting_since=(at(0).timestamp(),),
                                          known=("p1",)),
              "us-west1": RegionMemory(boot_s=100.0, last_boot_at=at(-600))}
    booted = ZenPlanner().plan(snap(7190, memory, (Vm("p1", "us-central1", VmPhase.IDLE, at(7180)),)))
    assert booted.memory["us-central1"].boot_s == 100.0
    assert booted.memory["us-central1"].blocked_until is None  # it delivers again all the same
