"""A flex-start pool's resize requests as the planner sees them in production: pending VMs named
``<MIG>+<request>+<n>`` (``zen.adapters.flex_start``), deleting any of which cancels the whole request, and
a granted request's VMs listed under new names.

- A request of several VMs that waited past its pool's deadline was struck: the planner kept one pending VM
  as the pool's probe and deleted the others, which cancelled the request, probe included; asked again, each
  request lived at most about 30 minutes, so a queue slower than that never granted one. The probe's request
  is now kept whole (``zen.scaling.flexrun.keep_requests_whole``).
- After a grant, the pool learned its asked-to-usable time from the new names: the grant-to-usable time
  alone (2 minutes where the request had queued 20). The next request then counted as stuck after 4
  minutes. A flex-start pool's time is its estimate, ``flex_start_estimate_s`` (``Ranking.boot_s``)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

from tests.scaling.fakes import FakeFleet, RecordingMig
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import DemandGroup, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigInstance
from zen.scaling.pricing import cluster_pools

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


class FlexMig(RecordingMig):
    """Each resize a request whose VMs are listed pending until ``grant`` (deleting one cancels them all)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.ids, self.made = itertools.count(), []

    def resize(self, size, together=()):
        super().resize(size, together)
        request, more = f"r{next(self.ids)}", size - len(self.instances)
        self.made.append(request)
        self.instances += [MigInstance(f"{self.name}+{request}+{i}", None, "CREATING", "", None) for i in range(more)]

    def delete_instances(self, names, zones):
        self.calls.append(("delete_instances", self.region, sorted(names)))
        requests = {n.split("+")[1] for n in names if "+" in n}
        self.instances = [i for i in self.instances if i.name not in names
                          and not ("+" in i.name and i.name.split("+")[1] in requests)]
        self.target = len(self.instances)

    def grant(self, vm: str) -> None:
        self.instances = [MigInstance(vm, f"{self.region}-a", "NONE", "RUNNING", None)]


class Fleet(FakeFleet):
    """Each instance first seen when first listed."""

    def __init__(self, *args):
        super().__init__(*args)
        self.seen: dict[str, datetime] = {}

    def see_instances(self, cluster, instances, now, billed=None):
        names = [n for listed in instances.values() for n in listed]
        return {n: self.seen.setdefault(n, now) for n in names}


def _cluster():
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=["us-central1"],
                           max_vms_per_region=8, max_vms=8, provisioning=["flex-start"])
    pools = cluster_pools(config)
    [key] = pools
    mig, t = FlexMig(key, [], 0, []), [NOW]
    fleet = Fleet(FleetFacts((DemandGroup((key,), 3, NOW),), {}, {}, {}, 0), NOW)
    manager = ClusterManager(config, fleet, {key: mig}, lambda: t[0], Timing(), ZenPlanner(), telemetry=False,
                             pools=pools)
    return key, mig, fleet, manager, t


def _minute(fleet, manager, t, demand, agents=None):
    report = manager.run()
    fleet._facts = FleetFacts(demand, {}, agents or {}, fleet.recorded[-1][0], 0)  # the memory it recorded
    t[0] += timedelta(minutes=1)
    return report


def test_a_request_of_three_vms_waits_for_its_grant_past_the_pools_deadline():
    key, mig, fleet, manager, t = _cluster()
    demand = fleet._facts.demand
    for _ in range(120):
        _minute(fleet, manager, t, demand)
    assert mig.made == ["r0"] and len(mig.instances) == 3, (mig.made, [i.name for i in mig.instances])


def test_a_grant_does_not_teach_the_pool_its_guest_boot_as_its_queue():
    key, mig, fleet, manager, t = _cluster()
    demand = (DemandGroup((key,), 1, NOW),)
    fleet._facts = FleetFacts(demand, {}, {}, {}, 0)
    for minute in range(24):
        if minute == 20:  # granted after 20 minutes in the queue; usable 2 minutes later
            mig.grant("zen-c-vm1")
        agents = {"zen-c-vm1": {"state": "IDLE", "idle_since": t[0], "last_seen_at": t[0], "first_seen_at": t[0]}}
        _minute(fleet, manager, t, demand if minute < 22 else (), agents if minute >= 22 else None)
    later = (DemandGroup((key,), 1, t[0]),)  # a second job: its request waits in the queue 10 minutes
    cancelled, struck = [], []
    for _ in range(10):
        report = _minute(fleet, manager, t, later, agents)
        cancelled += [name for name in report.deleted if "+" in name]
        struck += [d.reason for d in report.decisions if d.action.value == "BLOCK"]
    assert not struck and not cancelled and len(mig.made) == 2, (struck, cancelled, mig.made)



def test_a_request_one_of_whose_vms_lost_its_race_is_kept_whole():
    """Three jobs wait for one request of three VMs when a VM of the pool goes idle and takes one of them: the
    request's third VM lost its race. Cancelling it cancelled the request, the two others' VMs with it, and
    asking again put them at the back of the queue. The request is kept whole now (a VM more than needed once
    granted, scaled down as any idle VM), and cancelled once no job wants it."""
    key, mig, fleet, manager, t = _cluster()
    demand = fleet._facts.demand
    _minute(fleet, manager, t, demand)
    assert mig.made == ["r0"] and len(mig.instances) == 3
    mig.instances.append(MigInstance("zen-c-vm0", f"{mig.region}-a", "NONE", "RUNNING", None))
    idle = {"zen-c-vm0": {"state": "IDLE", "idle_since": t[0], "last_seen_at": t[0], "first_seen_at": NOW}}
    fleet._facts = FleetFacts(demand, {}, idle, fleet.recorded[-1][0], 0)
    report = _minute(fleet, manager, t, demand, idle)
    assert not report.deleted and len(mig.instances) == 4 and mig.made == ["r0"], (report.deleted, mig.made)
    assert any(d.reason.startswith("kept: its flex-start request's other VMs are kept") for d in report.decisions), [
        d.reason for d in report.decisions]
    for _ in range(3):
        _minute(fleet, manager, t, (), idle)
    assert not [i for i in mig.instances if "+" in i.name] and mig.made == ["r0"], mig.made


def test_a_time_learned_before_is_not_read_for_a_flex_start_pool():
    """A pool that learned 2 minutes (its grant-to-usable time) before its time was no longer learned kept it in
    its stored memory, and took its next request for stuck after 4 minutes (its pool blocked)."""
    from zen.scaling.model import RegionMemory

    key, mig, fleet, manager, t = _cluster()
    demand = fleet._facts.demand
    fleet._facts = FleetFacts(demand, {}, {}, {key: RegionMemory(boot_s=120.0)}, 0)
    reports = [_minute(fleet, manager, t, demand) for _ in range(20)]
    struck = [d.reason for r in reports for d in r.decisions if d.action.value == "BLOCK"]
    assert mig.made == ["r0"] and not struck and not any(r.deleted for r in reports), (mig.made, struck)


def test_a_stuck_request_of_more_vms_than_max_vms_leaves_gives_its_places_to_a_pool_with_capacity():
    """max_vms 2, a flex-start request of 2 VMs stuck past its deadline, one job that spot (not stocked out) could
    take: the request's second VM, planned to go, was counted as a place freed, so no probe gave its place, and
    that deletion was then taken back (a request is cancelled whole): pass after pass nothing moved. The probe's
    request now goes whole."""
    from tests.scaling.test_planner import at, snap
    from zen.scaling.model import ClusterLimits, Pool, QueuedJob, RegionMemory, Vm, VmPhase

    pools = {"us-central1": Pool("us-central1", "spot", 2.37), "us-central1/flex-start": Pool("us-central1", "flex-start", 3.26)}
    flex = "us-central1/flex-start"
    pending = tuple(Vm(f"zen-c-us-central1-flex+r1+{i}", flex, VmPhase.BOOTING, at(0)) for i in range(2))
    memory = {"us-central1": RegionMemory(last_boot_at=at(-60)), flex: RegionMemory()}
    job = QueuedJob("j", tuple(pools), at(1850))
    plan = ZenPlanner().plan(snap(1900, queued=(job,), vms=pending, memory=memory,
                                  limits=ClusterLimits("c", tuple(pools), 4, 2, pools=pools), timing=Timing()))
    assert sorted(name for _, name in plan.delete) == [vm.name for vm in pending]


def test_past_its_bound_a_job_a_queued_request_would_cover_is_asked_a_vm_of_another_pool_it_accepts():
    """A job accepting standard and flex-start, its own bound 1,000 s, goes to the cheaper flex-start pool (its
    900 s estimate fits). Past the bound the group ranks by speed, but the request still queued covered it: nothing
    was asked in standard (with capacity) until the request counted as stuck, 1,800 s after the ask."""
    from tests.scaling.test_planner import at, snap
    from zen.scaling.model import ClusterLimits, Pool, QueuedJob, RegionMemory, Vm, VmPhase

    pools = {"us-central1": Pool("us-central1", "standard", 5.92), "us-central1/flex-start": Pool("us-central1", "flex-start", 3.26)}
    memory = {"us-central1": RegionMemory(last_boot_at=at(-60)), "us-central1/flex-start": RegionMemory()}
    job = QueuedJob("j", tuple(pools), at(0), max_wait_s=1000)

    def plan(now, vms=()):
        return ZenPlanner().plan(snap(now, queued=(job,), vms=vms, memory=dict(memory), timing=Timing(),
                                      limits=ClusterLimits("c", tuple(pools), 4, 8, pools=pools)))

    assert plan(0).add == {"us-central1/flex-start": 1}
    request = Vm("zen-c-us-central1-flex+r1+0", "us-central1/flex-start", VmPhase.BOOTING, at(0))
    assert plan(900, (request,)).add == {}  # within its bound it waits for its request
    for now in (1100, 1500, 1790):
        added = plan(now, (request,)).add
        assert added.get("us-central1", 0) >= 1, (now, added)
