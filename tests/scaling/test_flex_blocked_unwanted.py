"""A flex-start pool struck (a request of its FAILED, its queue stuck, a quota read with no room) covers no job while
blocked, so its other requests still queued were counted as needed by none and cancelled by none: a job stopped (or
started elsewhere) left its request queued for the rest of the block, and capacity freed meanwhile granted it, a VM
booted and billed for nobody. Through the Compute stand-in and the official client."""

from __future__ import annotations

from datetime import timedelta

from tests.scaling.test_flex_start_mig import NOW, ZONES, cloud, flex_manager, requests_of  # noqa: F401 - the fixture
from zen.scaling.model import Action, DemandGroup


def test_a_request_of_a_blocked_flex_start_pool_whose_job_went_is_cancelled_before_a_grant(cloud):
    """Two jobs, a request each; Compute fails the first (the pool blocked 180 s), then both jobs are stopped. The
    second request goes at the next pass, before capacity comes back (150 s) and would grant it."""
    standin, flex, cluster = cloud(schedule=[{"at_s": 0, "zone": z, "capacity": 0} for z in ZONES]
                                   + [{"at_s": 150, "zone": ZONES[0], "capacity": 1}])
    now = [NOW]
    manager, pool, fleet = flex_manager(cluster, flex, 2, now)
    blocked, granted = [], set()
    for minute in range(8):
        if minute == 1:  # Compute gives the first request up
            with standin.world.lock:
                standin.world.resize_requests.fail(requests_of(standin, flex)[0], "ZONE_RESOURCE_POOL_EXHAUSTED", "")
        if minute == 2:  # both jobs stopped
            fleet.demand = ()
        report = manager.run()
        blocked += [d for d in report.decisions if d.action is Action.BLOCK]
        granted |= {r.name for r in requests_of(standin, flex) if r.state == "SUCCEEDED"}
        now[0] += timedelta(minutes=1)
        standin.advance(60)
    assert blocked, "the failed request struck its pool"
    assert not granted and not flex.read().instances, (granted, [r.state for r in requests_of(standin, flex)])


def test_a_blocked_flex_start_pool_keeps_the_requests_its_waiting_jobs_may_take(cloud):
    """Three jobs, a request each; Compute fails one, and one job is stopped: the two left still wait for the pool
    (its only one), and both requests still queued are theirs."""
    standin, flex, cluster = cloud(capacity=0)
    now = [NOW]
    manager, pool, fleet = flex_manager(cluster, flex, 3, now)
    for minute in range(4):
        if minute == 1:
            with standin.world.lock:
                standin.world.resize_requests.fail(requests_of(standin, flex)[0], "ZONE_RESOURCE_POOL_EXHAUSTED", "")
        if minute == 2:
            fleet.demand = (DemandGroup((pool,), 2, NOW),)
        manager.run()
        now[0] += timedelta(minutes=1)
        standin.advance(60)
    assert sorted(r.state for r in requests_of(standin, flex)) == ["ACCEPTED", "ACCEPTED"]
