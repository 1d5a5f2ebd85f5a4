"""VMs that get capacity and never become usable (a VM image or startup script that fails, an agent that
cannot reach Pub/Sub): each was struck like a stockout, blocked at most ``max_block_s``, deleted
``boot_timeout_s`` after it got capacity, and asked for again, for as long as a job stayed queued: 73 VMs a
day (12 VM-hours billed) for one job in one region, 219 in three. From the third such VM of the cluster in a
row, every pool is blocked for longer and longer (up to ``probes.SILENT_MAX_BLOCK_S``), one pool's VM trying
at a time, and a VM usable anywhere lifts it. The production ``ClusterManager`` and planner, minute by minute,
over MIG fakes whose VMs are RUNNING a minute after they are asked for.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

from tests.scaling.fakes import FakeFleet
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Action, DemandGroup, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigInstance, MigState, MigSummary
from zen.scaling.pricing import cluster_pools

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
UP_S = 60  # asked -> RUNNING (billed from then on)
_names = itertools.count()


class BootingMig:
    """A MIG whose VMs are RUNNING ``UP_S`` after the ask; counts VMs made and seconds billed."""

    def __init__(self, region: str, clock):
        self.project, self.region, self.name = "test", region, f"zen-test-{region}"
        self.clock, self.asked, self.target, self.made, self.billed_s = clock, {}, 0, 0, 0.0

    def running(self) -> list[str]:
        return [n for n, at in self.asked.items() if (self.clock() - at).total_seconds() >= UP_S]

    def region_summaries(self):
        return {self.name: MigSummary(self.target, True)}

    def read(self, since=None, summary=None) -> MigState:
        up = set(self.running())
        return MigState(self.target, [MigInstance(n, f"{self.region}-a", "NONE" if n in up else "CREATING",
                                                  "RUNNING" if n in up else "", None) for n in self.asked], [])

    def target_size(self) -> int:
        return self.target

    def resize(self, size: int, together=()) -> None:
        for _ in range(size - self.target):
            self.asked[f"vm-{next(_names)}"] = self.clock()
            self.made += 1
        self.target = size

    def delete_instances(self, names, zones) -> None:
        for name in names:
            if self.asked.pop(name, None) is not None:
                self.target -= 1


class Fleet(FakeFleet):
    """One job queued in every pool; agents heard only once ``healthy`` (the image fixed); memory carried."""

    def __init__(self, demand):
        super().__init__(FleetFacts(demand, {}, {}, {}, 0), T0)
        self.demand, self.first, self.healthy, self.migs = demand, {}, False, {}
        self.heard_in: set[str] = set()  # pools whose agents are heard even while the others' are not

    def see_instances(self, cluster, instances, now, billed=None):
        return {n: self.first.setdefault(n, now) for names in instances.values() for n in names}

    def facts(self, cluster, arrivals_since):
        memory = self.recorded[-1][0] if self.recorded else {}
        agents = {n: {"state": "IDLE", "idle_since": T0, "last_seen_at": self.now[0]} for pool, mig in self.migs.items()
                  if self.healthy or pool in self.heard_in for n in mig.running()}
        return FleetFacts(self.demand, {}, agents, memory, 0)

    def memory(self, cluster):
        return self.facts(cluster, T0).memory


def _cluster(regions: list[str]):
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=regions,
                           max_vms_per_region=8, max_vms=8)
    pools = cluster_pools(config)
    now = [T0]
    migs = {pool: BootingMig(pool, lambda: now[0]) for pool in pools}
    fleet = Fleet((DemandGroup(tuple(pools), 1, T0),))
    fleet.migs, fleet.now = migs, now
    manager = ClusterManager(config, fleet, migs, lambda: now[0], Timing(), ZenPlanner(), telemetry=False, pools=pools)
    return manager, fleet, migs, now


def _minutes(manager, migs, now, minutes: int) -> None:
    for _ in range(minutes):
        manager.run()
        for mig in migs.values():
            mig.billed_s += 60 * len(mig.running())
        now[0] += timedelta(minutes=1)


def test_a_cluster_whose_vms_never_come_up_asks_for_a_few_a_day_not_one_every_20_minutes_in_each_region():
    manager, fleet, migs, now = _cluster(["us-central1", "us-west1", "europe-west4"])
    _minutes(manager, migs, now, 24 * 60)
    made, billed_h = sum(m.made for m in migs.values()), sum(m.billed_s for m in migs.values()) / 3600
    assert made <= 15 and billed_h <= 2.5, (made, billed_h)  # were 219 VMs, 36.5 VM-hours
    decisions = [d for _, ds in fleet.recorded for d in ds]
    assert any(d.action is Action.BLOCK and "never usable" in d.reason and "image or startup script" in d.reason
               for d in decisions)
    held = [d.reason for d in decisions if d.action is Action.HOLD]
    assert held and "got capacity and were never usable: its image, startup script or a region's network" in held[-1]
    assert "stocked out" not in held[-1]  # what the job's `zen explain` said: no region was out of GPUs


def test_once_the_vms_come_up_again_the_job_is_served_when_a_block_ends():
    manager, fleet, migs, now = _cluster(["us-central1", "us-west1"])
    _minutes(manager, migs, now, 6 * 60)
    memory = fleet.recorded[-1][0]
    assert sum(m.silent for m in memory.values()) >= 3
    fleet.healthy = True  # the image fixed: the next VM's agent is heard
    longest = max(m.blocked_until for m in memory.values() if m.blocked_until) - now[0]
    _minutes(manager, migs, now, int(longest.total_seconds() // 60) + 5)
    memory = fleet.recorded[-1][0]
    assert all(m.blocked_until is None or m.blocked_until <= now[0] for m in memory.values())
    served = [pool for pool, mig in migs.items() if mig.running()]
    assert served and all(memory[pool].silent == 0 for pool in served)  # its own count reset by its boot


def test_one_slow_boot_is_blocked_as_before():
    """A VM late once (a slow guest) is struck as a stockout is, for ``block_s``: no longer block."""
    manager, fleet, migs, now = _cluster(["us-central1"])
    _minutes(manager, migs, now, 12)
    blocks = [d for _, ds in fleet.recorded for d in ds if d.action is Action.BLOCK]
    assert len(blocks) == 1 and blocks[0].reason.endswith("blocked for 180s (strike 1)"), blocks


def test_one_regions_vms_that_never_come_up_do_not_block_the_other_regions():
    """us-central1's VMs never come up (its network, say) for an hour of a job that may only run there; then a job
    that may only run in us-west1 arrives. A first version blocked every pool from the third such VM on, each new
    one of us-central1 pushing us-west1's block further: us-west1 was asked for no VM in the next 4 hours."""
    manager, fleet, migs, now = _cluster(["us-central1", "us-west1"])
    central, west = list(migs)
    fleet.heard_in = {west}
    fleet.demand = (DemandGroup((central,), 1, T0),)
    _minutes(manager, migs, now, 60)
    assert migs[central].made >= 3 and migs[west].made == 0
    fleet.demand = (DemandGroup((central,), 1, T0), DemandGroup((west,), 1, now[0]))
    _minutes(manager, migs, now, 10)
    assert migs[west].made == 1 and migs[west].running()
