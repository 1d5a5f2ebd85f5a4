"""A flex-start resize asks in several resize requests (one per one-node job's VM); Compute rate limits one after
others were made (403 rateLimitExceeded, the project's write quota for a moment). The resize was said "not confirmed"
and its pool struck as if refused: blocked, its jobs told its resize failed, though the requests made were queued and
the rest only had to be asked again next pass. The Compute stand-in through the official client."""
from __future__ import annotations

from datetime import timedelta

from tests.scaling.test_flex_start_mig import NOW, cloud, flex_manager, requests_of  # noqa: F401 - fixture
from zen.scaling.model import Action
from zen.scaling.unread import last_known_size
from zen_dev.local.compute.resources import ApiError


def test_a_rate_limited_resize_request_after_others_strikes_no_pool_and_counts_those_made(cloud):
    standin, flex, cluster = cloud()
    handle = standin.api.handle
    inserts = [0]

    def limited(method, path, query, body):  # the second insert onwards of the first pass: 403 rateLimitExceeded
        if method == "POST" and path.endswith("/resizeRequests"):
            inserts[0] += 1
            if inserts[0] > 1 and limited.on:
                return 403, ApiError(403, "rateLimitExceeded", "Rate Limit Exceeded").body()
        return handle(method, path, query, body)

    limited.on = True  # type: ignore[attr-defined]
    standin.api.handle = limited
    now = [NOW]
    manager, pool, fleet = flex_manager(cluster, flex, 3, now)
    report = manager.run()
    assert len(requests_of(standin, flex)) == 1
    blocks = [d.reason for d in report.decisions if d.action is Action.BLOCK]
    assert not blocks, blocks
    memory = fleet.recorded[-1][0][pool]
    assert memory.blocked_until is None and not memory.resize_failed, memory
    assert report.added == {pool: 1}, report.added  # the request made: counted toward the limits, said added
    limited.on = False  # type: ignore[attr-defined]
    now[0] += timedelta(minutes=1)
    standin.advance(1)
    manager.run()
    assert sorted(r.resize_by for r in requests_of(standin, flex)) == [1, 1, 1]  # the rest asked the next pass


def test_the_requests_made_before_the_rate_limit_count_while_the_mig_cannot_be_read(cloud):
    """The pass leaves its pool's memory sized as the requests it made (``RegionMemory.sized``): it said the MIG held
    none, so a next pass unable to read it counted it empty toward the cluster's limits (``last_known_size``), the VM
    asked for and queued outside them."""
    standin, flex, cluster = cloud()
    handle = standin.api.handle

    def limited(method, path, query, body):  # the second insert onwards: 403 rateLimitExceeded
        if method == "POST" and path.endswith("/resizeRequests"):
            limited.inserts += 1  # type: ignore[attr-defined]
            if limited.inserts > 1:  # type: ignore[attr-defined]
                return 403, ApiError(403, "rateLimitExceeded", "Rate Limit Exceeded").body()
        return handle(method, path, query, body)

    limited.inserts = 0  # type: ignore[attr-defined]
    standin.api.handle = limited
    manager, pool, fleet = flex_manager(cluster, flex, 3, [NOW])
    manager.run()
    assert len(requests_of(standin, flex)) == 1
    memory = fleet.recorded[-1][0]
    assert memory[pool].sized == 1, memory[pool]
    assert last_known_size(pool, memory, {}) == 1
