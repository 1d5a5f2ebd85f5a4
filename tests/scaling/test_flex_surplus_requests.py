"""Three one-node jobs ask three flex-start requests (one each); two of the jobs are cancelled while the requests
queue. A request no queued job needs any more is cancelled at the next pass (docs/explanations/scaling.md), also
while another job still wants its pool: kept, all three were granted and two VMs booted for nobody, billed idle.
Driven through ClusterManager + FlexStartMig against the Compute stand-in (official client)."""

from __future__ import annotations

from datetime import timedelta

from tests.scaling.test_flex_start_mig import NOW, ZONES, cloud, flex_manager, requests_of  # noqa: F401 - the fixture
from zen.scaling.model import DemandGroup


def test_requests_of_cancelled_jobs_are_cancelled_while_another_job_still_wants_the_pool(cloud):
    # No capacity for the first 10 minutes, then 10 VMs a zone.
    standin, flex, cluster = cloud(schedule=[{"at_s": at, "zone": z, "capacity": c}
                                             for z in ZONES for at, c in ((0, 0), (600, 10))])
    now = [NOW]
    manager, pool, fleet = flex_manager(cluster, flex, 3, now)

    def minute():
        report = manager.run()
        now[0] += timedelta(minutes=1)
        standin.advance(60)
        return report

    minute()
    assert sorted(r.resize_by for r in requests_of(standin, flex) if r.state == "ACCEPTED") == [1, 1, 1]
    fleet.demand = (DemandGroup((pool,), 1, NOW),)  # two of the three jobs cancelled
    reports = [minute() for _ in range(3)]
    queued = [r.name for r in requests_of(standin, flex) if r.state == "ACCEPTED"]
    for _ in range(8):  # capacity comes at 10 minutes
        reports.append(minute())
    granted = [r.name for r in requests_of(standin, flex) if r.state == "SUCCEEDED"]
    said = [(d.action.value, d.reason) for r in reports[:3] for d in r.decisions]
    vms = [i.name for i in flex.read().instances]
    assert len(queued) == 1 and len(granted) <= 1, (queued, granted, vms, said)
