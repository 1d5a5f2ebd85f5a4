"""A flex-start request no queued job needs any more is cancelled at the next pass; Compute gave the request up
(FAILED) between the pass's read and its cancel, so the cancel was refused (only a queued request can be cancelled).
The pass's HOLD said the request was "granted since it was read, its VMs are seen as any other": ``zen explain``
told of VMs Compute never made. The refused cancel says what became of the request, as Compute lists it then.
Through the real ClusterManager, ZenPlanner and FlexStartMig against the Compute stand-in (official client)."""

from __future__ import annotations

from datetime import timedelta

from tests.scaling.test_flex_start_mig import NOW, ZONES, cloud, flex_manager, requests_of  # noqa: F401 - the fixture
from zen.scaling.model import Action


def test_a_cancel_refused_because_compute_failed_the_request_does_not_say_it_was_granted(cloud):
    standin, flex, cluster = cloud(schedule=[{"at_s": 0, "zone": z, "capacity": 0} for z in ZONES])
    now = [NOW]
    manager, pool, fleet = flex_manager(cluster, flex, 1, now)
    manager.run()  # the job's request: queued (no capacity)
    [pending] = [i.name for i in flex.read().instances]
    handle = standin.api.handle

    def failed_first(method, path, query, body):  # Compute gives the request up as the cancel is sent
        if method == "POST" and path.endswith("/cancel"):
            with standin.world.lock:
                for request in requests_of(standin, flex):
                    standin.world.resize_requests.fail(request, "ZONE_RESOURCE_POOL_EXHAUSTED", "no A100s")
        return handle(method, path, query, body)

    standin.api.handle = failed_first
    fleet.demand = ()  # the job is stopped
    now[0] += timedelta(minutes=1)
    standin.advance(60)  # still queued when the pass reads it
    report = manager.run()
    assert [r.state for r in requests_of(standin, flex)] == ["FAILED"]  # no VM was made
    said = [(d.action, d.reason) for d in report.decisions if d.vm == pending]
    assert [a for a, _ in said] == [Action.HOLD] and "not cancelled" in said[0][1], said
    assert "granted" not in said[0][1] and "FAILED" in said[0][1], said
