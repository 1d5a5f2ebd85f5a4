"""A flex-start request no queued job needs any more is cancelled at the next pass; Compute granted it between the
pass's read and its cancel, so the cancel was refused (only a queued request can be cancelled). The pass recorded a
DELETE all the same, "cancelled before a grant", and counted the VM as deleted: ``zen explain`` said the request was
cancelled while Compute booted its VM, billed. The refused cancel is a HOLD saying so. Through the real
ClusterManager, ZenPlanner and FlexStartMig against the Compute stand-in (official client)."""

from __future__ import annotations

from datetime import timedelta

from tests.scaling.test_flex_start_mig import NOW, ZONES, cloud, flex_manager, requests_of  # noqa: F401 - the fixture
from zen.scaling.model import Action


def test_a_cancel_refused_because_compute_granted_the_request_is_not_said_to_have_cancelled_it(cloud):
    standin, flex, cluster = cloud(schedule=[{"at_s": at, "zone": z, "capacity": c}
                                             for z in ZONES for at, c in ((0, 0), (100, 10))])
    now = [NOW]
    manager, pool, fleet = flex_manager(cluster, flex, 1, now)
    manager.run()  # the job's request: queued (no capacity yet)
    [pending] = [i.name for i in flex.read().instances]
    handle = standin.api.handle

    def granted_first(method, path, query, body):  # capacity comes, and Compute grants it, as the cancel is sent
        if method == "POST" and path.endswith("/cancel"):
            standin.advance(60)
        return handle(method, path, query, body)

    standin.api.handle = granted_first
    fleet.demand = ()  # the job is stopped
    now[0] += timedelta(minutes=1)
    standin.advance(60)  # still queued when the pass reads it
    report = manager.run()
    assert [r.state for r in requests_of(standin, flex)] == ["SUCCEEDED"]  # granted: its VM boots, billed
    said = [(d.action, d.reason) for d in report.decisions if d.vm == pending]
    assert pending not in report.deleted, said
    assert [a for a, _ in said] == [Action.HOLD] and "not cancelled" in said[0][1], said
