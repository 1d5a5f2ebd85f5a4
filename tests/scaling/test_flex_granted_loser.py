"""A flex-start request that lost its race: asked with another VM for the same job, the other one took the job, and
Compute granted the request before a pass cancelled it. Its VMs join the MIG under new names, first seen at the grant,
so the planner took them for boots asked after the winner (their race still open), where another pool's loser asked
with the winner is deleted at once: the granted VM booted, went idle and was billed until the idle timeout, for no
job. A granted VM counts as asked when its request was. Through the Compute stand-in and the official client."""

from __future__ import annotations

from datetime import timedelta

from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_flex_start_mig import NOW, ZONES, cloud, requests_of  # noqa: F401 - the fixture
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Action, DemandGroup, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigInstance
from zen.scaling.pricing import cluster_pools


class SeenFleet(FakeFleet):
    """Facts a test sets (``demand``, ``held``, ``agents``), the planner's memory carried from pass to pass, and each
    instance first seen at the first pass that listed it (as ``see_instances`` records it in Postgres)."""

    def __init__(self, demand):
        super().__init__(FleetFacts(demand, {}, {}, {}, 0), NOW)
        self.demand, self.held, self.agents, self.first = demand, {}, {}, {}

    def facts(self, cluster, arrivals_since):
        return FleetFacts(self.demand, self.held, self.agents, self.recorded[-1][0] if self.recorded else {}, 0)

    def see_instances(self, cluster, instances, now, billed=None):
        for names in instances.values():
            for name in names:
                self.first.setdefault(name, now)
        return {name: self.first[name] for names in instances.values() for name in names}


def test_a_flex_start_request_granted_after_its_job_took_another_vm_is_deleted_at_the_next_pass(cloud):
    standin, flex, cluster = cloud(schedule=[{"at_s": 0, "zone": z, "capacity": 0} for z in ZONES]
                                   + [{"at_s": 90, "zone": ZONES[0], "capacity": 1}])  # the request granted at 90 s
    pools = cluster_pools(cluster)
    spot, standard, flex_pool = pools
    calls: list = []
    winner = MigInstance("zen-win", ZONES[0], "NONE", "RUNNING", None)  # asked with the request, for the same job
    migs = {spot: RecordingMig(spot, calls), standard: RecordingMig(standard, calls), flex_pool: flex}
    fleet = SeenFleet((DemandGroup((flex_pool,), 1, NOW),))
    now = [NOW]
    manager = ClusterManager(cluster, fleet, migs, lambda: now[0], Timing(), ZenPlanner(), telemetry=False,
                             pools=pools, concurrent=False)
    for _ in range(2):  # the flex-start pool's ask, then a pass that sees it queued
        manager.run()
        migs[spot].instances, migs[spot].target = [winner], 1  # asked by the first pass too: listed from the next
        now[0] += timedelta(seconds=60)
        standin.advance(60)
    assert [r.state for r in requests_of(standin, flex)] == ["SUCCEEDED"]  # granted; the winner took the job
    fleet.demand, fleet.held = (), {"zen-win": "job-1"}
    fleet.agents = {"zen-win": {"state": "BUSY", "idle_since": None, "last_seen_at": now[0]}}
    [granted] = [i.name for i in flex.read().instances]
    report = manager.run()
    deletes = [d.reason for d in report.decisions if d.action is Action.DELETE and d.vm == granted]
    assert granted in report.deleted and deletes, [(d.action, d.vm, d.reason) for d in report.decisions]
