"""A flex-start request Compute gave up (FAILED, a stockout) blocks its pool; while blocked, the queued job's HOLD
says the pool is out, not that a request is "still queued past their expected time ...: waiting for a grant": none
is queued, and no grant will come."""

from __future__ import annotations

from datetime import timedelta

from tests.scaling.test_flex_start_mig import NOW, cloud, flex_manager, requests_of  # noqa: F401 - the fixture
from zen.scaling.model import Action


def test_a_job_held_by_a_failed_request_is_not_said_to_wait_for_a_queued_one(cloud):
    standin, flex, cluster = cloud(capacity=0)
    now = [NOW]
    manager, pool, fleet = flex_manager(cluster, flex, 1, now)
    manager.run()
    with standin.world.lock:
        for request in requests_of(standin, flex):
            standin.world.resize_requests.fail(request, "ZONE_RESOURCE_POOL_EXHAUSTED", "no A100s in the region")
    now[0] += timedelta(minutes=1)
    standin.advance(60)
    report = manager.run()
    queued = [r for r in requests_of(standin, flex) if r.state == "ACCEPTED"]
    holds = [d.reason for d in report.decisions if d.action is Action.HOLD]
    assert not queued and holds, (queued, holds)
    assert not any("still queued" in h for h in holds), holds
    assert any("stocked out" in h for h in holds), holds


def test_a_job_held_by_a_request_failed_for_no_shortage_is_told_what_compute_said(cloud):
    """A request Compute failed for another reason than capacity (its template refused, say) blocks the pool too,
    and is asked again only when the block ends; its job was told the region "is stocked out; probes are waiting
    for capacity": neither is so."""
    standin, flex, cluster = cloud(capacity=0)
    now = [NOW]
    manager, pool, fleet = flex_manager(cluster, flex, 1, now)
    manager.run()
    with standin.world.lock:
        for request in requests_of(standin, flex):
            standin.world.resize_requests.fail(request, "INVALID_FIELD_VALUE", "the template's accelerator is not "
                                                                               "offered in this region")
    now[0] += timedelta(minutes=1)
    standin.advance(60)
    report = manager.run()
    holds = [d.reason for d in report.decisions if d.action is Action.HOLD]
    assert holds and not any("stocked out" in h or "probes are waiting" in h for h in holds), holds
    assert any("INVALID_FIELD_VALUE: the template's accelerator is not offered" in h for h in holds), holds
