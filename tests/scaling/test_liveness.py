"""VMs that cannot serve: an agent gone silent (crashed, VM hung), a VM RUNNING whose agent never
starts, a slow but healthy boot, and a hedge whose race is not decided yet. First through the
manager's recording fakes (the production classification of MIG instances and agents' rows), then
end to end (Compute stand-in, real Postgres, ticks). ``heard_since`` itself: test_heard_since."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from tests.messages import heartbeat
from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_scaling_integration import _jobs, stack, vm_beat, vm_claiming  # noqa: F401 - the fixture
from zen.core.config import ClusterConfig, Deadlines
from zen.scaling.manager import ClusterManager, ClusterReport
from zen.scaling.model import (
    Action, ClusterLimits, ClusterSnapshot, DemandGroup, ErrorKind, RegionMemory, Timing, Vm, VmPhase,
)
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigInstance

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
REGIONS = ["us-central1", "us-west1"]
ANY = (DemandGroup(tuple(REGIONS), 1, NOW - timedelta(hours=1)),)


class MemFleet(FakeFleet):
    """A FakeFleet that keeps the planner's memory between passes, as FleetDb does."""

    def record(self, cluster, memory, decisions, now, planned=()):
        super().record(cluster, memory, decisions, now, planned)
        self._facts = replace(self._facts, memory={**self._facts.memory, **memory})


def manager(instances, agents=None, demand=ANY, held=None, first_seen=NOW - timedelta(hours=3), memory=None,
            clock=lambda: NOW):
    calls: list = []
    migs = {"us-central1": RecordingMig("us-central1", calls, len(instances), instances),
            "us-west1": RecordingMig("us-west1", calls)}
    facts = FleetFacts(demand, held or {}, agents or {}, memory or {}, 0)
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=REGIONS,
                           max_vms_per_region=4, max_vms=8)
    fleet_ = MemFleet(facts, first_seen)
    return calls, fleet_, ClusterManager(config, fleet_, migs, clock, Timing(), ZenPlanner(), telemetry=False)


def running(name="vm1"):
    return MigInstance(name, "us-central1-a", "NONE", "RUNNING", None)


def agent(state, last_seen, idle_since=None, **more):
    return {"state": state, "idle_since": idle_since, "last_seen_at": last_seen, **more}


def deleted(calls):
    return [name for c in calls if c[0] == "delete_instances" for name in c[2]]


# -- 1, 2: agents gone silent --------------------------------------------------------------------
def test_the_liveness_deadline_is_three_vm_heartbeats_and_never_shorter_than_the_jobs():
    assert Timing().agent_silence_s == Deadlines().agent_silence_s == 180  # the defaults: 60 s beats, 120 s for a job
    assert Deadlines(heartbeat_timeout_s=600).agent_silence_s == 600  # a busy agent is not judged dead before its job is


def test_an_idle_vm_whose_agent_went_silent_is_no_supply_and_is_deleted():
    """Its agent said IDLE two hours ago and nothing since: the queued job gets a VM of its own, and
    the silent VM is deleted (the old planner counted it as idle supply: the job waited forever)."""
    dead = agent("IDLE", NOW - timedelta(hours=2), idle_since=NOW - timedelta(hours=2))
    calls, _, m = manager([running()], {"vm1": dead})
    report = m.run()
    assert report.added == {"us-central1": 1, "us-west1": 1}  # the job's VM, and its hedge
    assert deleted(calls) == ["vm1"]
    [why] = [d.reason for d in report.decisions if d.vm == "vm1"]
    assert "not heard for 7200s" in why


def test_an_idle_agent_heard_within_the_deadline_is_supply():
    fresh = agent("IDLE", NOW - timedelta(seconds=170), idle_since=NOW - timedelta(hours=2))
    calls, _, m = manager([running()], {"vm1": fresh})
    report = m.run()
    assert not report.added and not deleted(calls)


def test_a_busy_agent_gone_silent_after_its_job_was_requeued_is_deleted():
    """The lost-job sweep requeued its job: the row still says BUSY, the instance is RUNNING. It was
    BUSY forever, never deleted and counted against the limits; now it is deleted once silent."""
    dead = agent("BUSY", NOW - timedelta(hours=2))
    calls, _, m = manager([running()], {"vm1": dead}, demand=())
    report = m.run()
    assert deleted(calls) == ["vm1"]
    assert any(d.action is Action.DELETE and d.vm == "vm1" and "busy, no job" in d.reason for d in report.decisions)


def test_a_silent_vm_that_holds_a_job_is_never_deleted():
    """The job's own deadline (the lost-job sweep) decides first; the drain refuses a VM holding one."""
    dead = agent("BUSY", NOW - timedelta(hours=2))
    calls, fleet_, m = manager([running()], {"vm1": dead}, demand=(), held={"vm1": "job-1"})
    report = m.run()
    assert not deleted(calls) and not fleet_.drained and not report.kept_busy


def test_silence_counts_from_when_zen_could_hear_again_after_an_outage_of_its_own():
    """Zen was down two hours (no heartbeat could be recorded) and came back a minute ago: the agent's
    silence says nothing yet (as the lost-job sweep counts a job's, ``heard_since``)."""
    row = agent("IDLE", NOW - timedelta(hours=2), idle_since=NOW - timedelta(hours=3),
                heard_since=NOW - timedelta(minutes=1))
    calls, _, m = manager([running()], {"vm1": row})
    [vm] = m.snapshot(ClusterReport("c"))[0].vms
    assert vm.phase is VmPhase.IDLE and vm.heard_at == NOW - timedelta(minutes=1)
    report = m.run()
    assert not report.added and not deleted(calls)


def test_an_agent_row_without_last_seen_at_counts_from_the_instances_first_sighting():
    row = agent("IDLE", None)  # an old row: no idle_since, no last_seen_at
    _, _, m = manager([running()], {"vm1": row}, first_seen=NOW - timedelta(seconds=60))
    [vm] = m.snapshot(ClusterReport("c"))[0].vms
    assert vm.phase is VmPhase.IDLE and vm.since == vm.heard_at == NOW - timedelta(seconds=60)
    calls, _, m = manager([running()], {"vm1": row}, first_seen=NOW - timedelta(hours=1))
    m.run()
    assert deleted(calls) == ["vm1"]


# -- 3: a RUNNING VM whose agent never starts ----------------------------------------------------
def test_a_running_vm_whose_agent_never_starts_is_deleted_and_strikes_its_region():
    """Its startup failed: RUNNING (billed), no agent. It was kept forever as a free probe, its
    region blocked, a job pinned there never served. Now it is deleted by ``boot_timeout_s`` at the
    latest, its region struck, and once the block is over a new VM is asked there."""
    now = [NOW]
    pinned = (DemandGroup(("us-central1",), 1, NOW),)
    calls, _, m = manager([running()], demand=pinned, first_seen=NOW - timedelta(minutes=1), clock=lambda: now[0])
    reports = []
    for _ in range(30):  # half an hour of one-minute ticks
        reports.append(m.run())
        now[0] += timedelta(minutes=1)
    at = next(i for i, r in enumerate(reports) if "vm1" in r.deleted)
    assert at <= Timing().boot_timeout_s / 60  # the first pass saw it RUNNING
    assert any(d.action is Action.BLOCK and d.region == "us-central1" for r in reports[:at + 1] for d in r.decisions)
    assert any(r.added.get("us-central1") for r in reports[at + 1:])


def test_only_an_instance_still_waiting_for_capacity_is_kept_as_a_probe():
    waiting = MigInstance("probe", None, "CREATING", "", ErrorKind.STOCKOUT)
    seen = {"us-central1": RegionMemory(started=("broken",), started_since=(NOW.timestamp() - 300,))}
    calls, _, m = manager([running("broken"), waiting], demand=(DemandGroup(("us-central1",), 1, NOW),),
                          memory=seen, first_seen=NOW - timedelta(seconds=400))
    m.run()
    assert deleted(calls) == ["broken"]


# -- 4: slow but healthy boots -------------------------------------------------------------------
def test_a_probe_that_got_capacity_after_a_long_wait_gets_its_boot_time():
    """A probe waited an hour for capacity; it now boots. Its boot counts from when it got capacity."""
    memory = {"us-central1": RegionMemory(booting=("probe",), booting_since=(NOW.timestamp() - 3600,))}
    staging = MigInstance("probe", "us-central1-a", "CREATING", "STAGING", None)
    calls, _, m = manager([staging], demand=(DemandGroup(("us-central1",), 1, NOW),), memory=memory,
                          first_seen=NOW - timedelta(hours=1))
    report = m.run()
    assert not deleted(calls) and not report.added


def test_slow_but_healthy_boots_are_kept_while_a_stockout_still_spills_at_once():
    """The region's VMs are known to take 230 s; three got capacity 250 s ago (RUNNING, agents still
    starting). They used to be deleted as stuck after spill_after_s (240 s), the region struck and the
    jobs asked again elsewhere; now they are kept and count as supply."""
    memory = {"us-central1": RegionMemory(last_boot_at=NOW - timedelta(hours=1), boot_s=230.0)}
    three = (DemandGroup(tuple(REGIONS), 3, NOW),)
    calls, _, m = manager([running(f"a{i}") for i in range(3)], demand=three, memory=memory,
                          first_seen=NOW - timedelta(seconds=250))
    report = m.run()
    assert not deleted(calls) and not report.added
    assert not any(d.action is Action.BLOCK for d in report.decisions)
    # Past twice the learned boot since they got capacity they are stuck: the demand spills, one is kept
    # (until boot_timeout_s) while no instance waits for capacity there to probe the region, the others go.
    names = tuple(f"a{i}" for i in range(3))
    seen = {"us-central1": replace(memory["us-central1"], started=names, started_since=(NOW.timestamp() - 461,) * 3)}
    calls, _, m = manager([running(name) for name in names], demand=three, memory=seen,
                          first_seen=NOW - timedelta(seconds=600))
    report = m.run()
    assert len(deleted(calls)) == 2 and report.added == {"us-west1": 3}
    # Still waiting for capacity with a stockout error: spills at once, one kept as a free probe.
    waiting = [MigInstance(f"w{i}", None, "CREATING", "", ErrorKind.STOCKOUT) for i in range(3)]
    calls, _, m = manager(waiting, demand=three, memory=memory, first_seen=NOW - timedelta(seconds=20))
    report = m.run()
    assert len(deleted(calls)) == 2 and report.added == {"us-west1": 3}


# -- 5: hedges -----------------------------------------------------------------------------------
def hedge_snapshot(usable: Vm) -> ClusterSnapshot:
    t0 = NOW
    vms = (Vm("a1", "A", VmPhase.BOOTING, t0), Vm("b1", "B", VmPhase.BOOTING, t0), usable)  # J's ask and its hedge
    return ClusterSnapshot(now=t0 + timedelta(seconds=31), cluster=ClusterLimits("c", ("A", "B", "C"), 4, 12),
                           queued=(), demand=(DemandGroup(("A", "B"), 1, t0),), vms=vms,
                           target_sizes={"A": 1, "B": 1, "C": 1}, timing=Timing())


def test_a_hedge_is_not_cancelled_by_a_vm_its_job_cannot_use():
    """Another job's VM became idle in C, which J may not use: J's race (A or B) is still open."""
    plan = ZenPlanner().plan(hedge_snapshot(Vm("c1", "C", VmPhase.IDLE, NOW + timedelta(seconds=30))))
    assert plan.delete == []


def test_a_hedge_is_cancelled_once_a_vm_the_same_demand_can_use_is_usable():
    plan = ZenPlanner().plan(hedge_snapshot(Vm("a2", "A", VmPhase.IDLE, NOW + timedelta(seconds=30))))
    assert ("B", "b1") in plan.delete


# -- end to end ----------------------------------------------------------------------------------
def test_a_vm_whose_agent_died_with_its_job_is_deleted_once_the_job_is_requeued(stack, clock):
    """The agent claims a job and dies. The lost-job sweep requeues the job; the VM's row still says
    BUSY. Ticks every minute (no outage): the VM is deleted and the job gets a new VM."""
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    vm = vm_claiming(fn, stack)
    fn.heartbeat(vm_beat(vm.name, "us-west1", "BUSY", 2, sent_at=clock().isoformat()))
    fn.heartbeat(heartbeat("a", "RUNNING", 2, vm=vm.name, region="us-west1"))
    for _ in range(4):  # then nothing from it
        advance(60)
        fn.tick()
    assert [j.status.value for j in _jobs(zen)] == ["QUEUED"]  # swept: requeued
    names = [i.name for i in instances("us-west1")]
    assert vm.name not in names and len(names) == 1  # deleted; the job's new VM asked
