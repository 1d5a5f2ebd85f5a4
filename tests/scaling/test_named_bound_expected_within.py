"""A job that names its own start bound (``max_start_wait_s``) may take any pool expected usable within what
is left of it, cheapest first (docs/explanations/scaling.md, prices and provisioning models).

The planner widened the price window by what was left of the bound, counted from the fastest pool's expected
time rather than from now: a job accepting standard and flex-start, its own bound 800 s, was asked a
flex-start VM (expected in 900 s, past its bound) where a standard one was expected in 120 s. It waited for the
cheaper queue until its bound had passed, then for a standard boot: it started after its deadline though it
could have started well before it (``zen.scaling.ranking.Ranking.for_group``)."""

from __future__ import annotations

from tests.scaling.test_planner import at, snap
from zen.scaling.model import ClusterLimits, Pool, QueuedJob, RegionMemory, Timing
from zen.scaling.planner import ZenPlanner

POOLS = {"us-central1": Pool("us-central1", "standard", 5.92),
         "us-central1/flex-start": Pool("us-central1", "flex-start", 3.26)}
MEMORY = {"us-central1": RegionMemory(last_boot_at=at(-60)), "us-central1/flex-start": RegionMemory()}


def asked(now: float, max_wait_s: float, queued_at: float = 0) -> dict[str, int]:
    """The pools asked for the queued job (neither hedges nor spare boots)."""
    job = QueuedJob("j", tuple(POOLS), at(queued_at), max_wait_s=max_wait_s)
    plan = ZenPlanner().plan(snap(now, queued=(job,), memory=dict(MEMORY), timing=Timing(),
                                  limits=ClusterLimits("c", tuple(POOLS), 4, 8, pools=POOLS)))
    return {d.region: d.count for d in plan.decisions
            if d.action.value == "ADD" and "queued job(s) without a VM" in d.reason}


def test_a_pool_expected_past_the_bound_is_not_taken_for_its_price():
    # flex-start's 900 s estimate fits a bound of 1,000 s: the cheaper pool
    assert asked(0, 1000) == {"us-central1/flex-start": 1}
    # not one of 800 s: standard, expected in 120 s (the boot estimate), meets it
    assert asked(0, 800) == {"us-central1": 1}
    # nor what is left of 1,000 s after 200 s queued: 800 s
    assert asked(200, 1000) == {"us-central1": 1}


def test_a_named_bound_never_narrows_the_price_slack():
    """Within ``cost_slack_s`` of the fastest a pool ranks by price whatever is left of a named bound, as it does
    for a job that names none (a bound a job names widens its choice)."""
    pools = {"us-central1": Pool("us-central1", "standard", 5.92), "us-central1/spot": Pool("us-central1", "spot", 2.0)}
    memory = {"us-central1": RegionMemory(last_boot_at=at(-60), boot_s=60),
              "us-central1/spot": RegionMemory(last_boot_at=at(-60), boot_s=150)}
    job = QueuedJob("j", tuple(pools), at(0), max_wait_s=100)
    plan = ZenPlanner().plan(snap(30, queued=(job,), memory=memory, timing=Timing(spare_boots=False, hedge_risk=0.5),
                                  limits=ClusterLimits("c", tuple(pools), 4, 8, pools=pools)))
    assert plan.add == {"us-central1/spot": 1}  # 150 s, within 120 s of standard's 60 s
