"""The planner on hand-built snapshots: pure, so each test states a situation and checks the plan."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from zen.scaling.model import (
    Action, ClusterLimits, ClusterSnapshot, DemandGroup, ErrorKind, MigError, QueuedJob, RegionMemory, Timing, Vm, VmPhase,
    ski_rental_keep_s,
)
from zen.scaling.planner import ZenPlanner

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
REGIONS = ("us-central1", "us-west1", "europe-west4")
LIMITS = ClusterLimits("4xa100-40gb", REGIONS, max_vms_per_region=4, max_vms=6)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def jobs(n: int, regions=REGIONS, queued_at: float = 0, prefix="j") -> tuple[QueuedJob, ...]:
    return tuple(QueuedJob(f"{prefix}{i}", tuple(regions), at(queued_at)) for i in range(n))


def trusted(regions=REGIONS, booted_at: float = -60) -> dict[str, RegionMemory]:
    """Every region delivered a VM recently and never stocked out: no reason to hedge."""
    return {r: RegionMemory(last_boot_at=at(booted_at)) for r in regions}


CAUTIOUS = Timing(hedge_risk=0.5)  # hedges only regions with a poor record (most tests: none)


def snap(now: float, queued=(), vms=(), errors=(), memory=None, limits=LIMITS, targets=None,
         arrivals=0, timing=CAUTIOUS) -> ClusterSnapshot:
    vms = tuple(vms)
    memory = trusted(limits.regions) if memory is None else memory
    if targets is None:
        targets = {r: sum(vm.region == r for vm in vms) for r in limits.regions}
    return ClusterSnapshot(now=at(now), cluster=limits, queued=tuple(queued), vms=vms, target_sizes=targets,
                           errors=tuple(errors), memory=memory, timing=timing, arrivals_last_hour=arrivals)


def vm(name, region, phase, since=0.0, error=None, job=None):
    return Vm(name, region, phase, at(since), creation_error=error, job_id=job)


def test_demand_goes_to_the_preferred_region():
    plan = ZenPlanner().plan(snap(0, queued=jobs(3)))
    assert plan.add == {"us-central1": 3}
    assert plan.delete == []


def test_idle_vms_are_reused_before_anything_boots():
    plan = ZenPlanner().plan(snap(500, queued=jobs(2), vms=[vm("a", "us-west1", VmPhase.IDLE, since=0),
                                                            vm("b", "us-central1", VmPhase.IDLE, since=0)]))
    assert plan.add == {} and plan.delete == []  # both idle VMs are needed, however long idle


def test_booting_vms_count_as_supply():
    plan = ZenPlanner().plan(snap(30, queued=jobs(2), vms=[vm("a", "us-central1", VmPhase.BOOTING, since=0)]))
    assert plan.add == {"us-central1": 1}


def test_stockout_moves_demand_to_the_next_region_and_keeps_one_free_probe():
    planner = ZenPlanner()
    first = planner.plan(snap(0, queued=jobs(3)))
    assert first.add == {"us-central1": 3}
    stuck = [vm(f"c{i}", "us-central1", VmPhase.BOOTING, since=1, error=ErrorKind.STOCKOUT) for i in range(3)]
    errors = [MigError("us-central1", ErrorKind.STOCKOUT, at(5), instance="c0")]
    second = planner.plan(snap(60, queued=jobs(3), vms=stuck, errors=errors, memory=first.memory))
    assert second.add == {"us-west1": 3}
    assert sorted(name for _, name in second.delete) == ["c1", "c2"]  # c0 stays: a probe that costs nothing
    assert {d.reason for d in second.decisions if d.action is Action.DELETE} == {  # was "stuck booting for 59s"
        "its creation failed (stockout); not needed as a probe"}
    assert any(d.action is Action.BLOCK and d.region == "us-central1" for d in second.decisions)
    # Later jobs skip the blocked region straight away.
    third = planner.plan(snap(90, queued=jobs(3) + jobs(1, prefix="k", queued_at=80),
                             vms=[stuck[0]] + [vm(f"w{i}", "us-west1", VmPhase.BOOTING, 61) for i in range(3)],
                             errors=errors, memory=second.memory))
    assert third.add == {"us-west1": 1}


def test_recovered_region_comes_back_when_its_probe_boots():
    planner = ZenPlanner()
    memory = {"us-central1": RegionMemory(blocked_until=at(900), strikes=2, booting=("probe",),
                                          known=("probe",))}
    recovered = planner.plan(snap(300, queued=jobs(2, queued_at=290),
                                  vms=[vm("probe", "us-central1", VmPhase.IDLE, since=290)], memory=memory))
    assert any(d.action is Action.UNBLOCK for d in recovered.decisions)
    assert recovered.memory["us-central1"].blocked_until is None
    assert recovered.add == {"us-central1": 1}  # one job takes the probe, the other boots there too


def test_a_vm_booting_past_the_spill_deadline_spills_its_job():
    slow = vm("slow", "us-central1", VmPhase.BOOTING, since=0)
    plan = ZenPlanner().plan(snap(Timing().spill_after_s + 1, queued=jobs(1), vms=[slow]))
    assert plan.add == {"us-west1": 1}
    assert plan.delete == []  # kept as the region's probe


def test_busy_vms_are_never_deleted_and_idle_ones_go_after_the_grace_when_no_jobs_come():
    vms = [vm("busy", "us-central1", VmPhase.BUSY, since=0, job="x"),
           vm("idle-old", "us-west1", VmPhase.IDLE, since=0),
           vm("idle-new", "us-central1", VmPhase.IDLE, since=990)]
    plan = ZenPlanner().plan(snap(1000, vms=vms))
    assert plan.delete == [("us-west1", "idle-old")]  # idle-new is within its grace


def test_idle_vms_are_kept_like_ski_rental_at_any_arrival_rate():
    price = Timing().keep_factor * Timing().boot_estimate_s  # a cold start's billed boot
    keeps = [ski_rental_keep_s(f"spare-{c}", price, Timing().idle_timeout_s) for c in "abc"]
    assert all(0 <= k <= price for k in keeps) and len(set(keeps)) == 3  # a random threshold per VM
    vms = [vm(f"spare-{c}", "us-central1", VmPhase.IDLE, since=0) for c in "abc"]
    # No arrivals at all: one spare VM is still worth keeping (spare-c, the most recently considered)
    # for its threshold; the other two go after the grace.
    quiet = ZenPlanner().plan(snap(keeps[2] - 1, vms=vms))
    assert sorted(name for _, name in quiet.delete) == ["spare-a", "spare-b"]
    assert "beyond the 1 worth keeping" in quiet.decisions[-1].reason
    assert ZenPlanner().plan(snap(keeps[2] + 1, vms=vms[2:])).delete == [("us-central1", "spare-c")]
    # 120 arrivals an hour: ceil(120/3600 x keep) >= 3 jobs are expected while one is kept: all 3 stay.
    busy = ZenPlanner().plan(snap(min(keeps) - 1, vms=vms, arrivals=120))
    assert busy.delete == []
    # 60 an hour: 2 are expected (ceil(60/3600 x keep) = 2): the third spare goes after the grace.
    assert len(ZenPlanner().plan(snap(min(keeps) - 1, vms=vms, arrivals=60)).delete) == 1


def test_an_uncertain_region_is_hedged_in_the_next_one_after_every_job_got_its_first_ask():
    limits = ClusterLimits("c", REGIONS, max_vms_per_region=4, max_vms=5)
    never_seen = ZenPlanner().plan(snap(0, queued=jobs(3), memory={}, limits=limits, timing=CAUTIOUS))
    assert never_seen.add == {"us-central1": 3, "us-west1": 2}  # 3 jobs first, then hedges within the limit
    assert any("hedge" in d.reason for d in never_seen.decisions)
    trusted_plan = ZenPlanner().plan(snap(0, queued=jobs(3), limits=limits, timing=CAUTIOUS))
    assert trusted_plan.add == {"us-central1": 3}
    # The default hedges every cold boot (hedge_risk 0): no region of a spot cluster is certain.
    assert ZenPlanner().plan(snap(0, queued=jobs(3), limits=limits, timing=Timing())).add == {
        "us-central1": 3, "us-west1": 2}


def test_a_recent_stockout_ranks_a_region_below_the_next_preferred_one():
    memory = trusted()
    memory["us-central1"] = RegionMemory(last_boot_at=at(-2000), last_stockout_at=at(-600))
    plan = ZenPlanner().plan(snap(0, queued=jobs(1), memory=memory))
    assert plan.add == {"us-west1": 1}  # central's risk (about 0.85 x 240 s) outweighs one step of preference
    later = ZenPlanner().plan(snap(4 * 3600, queued=jobs(1), memory=memory))
    assert later.add == {"us-central1": 1}  # the stockout has faded


def test_the_loser_of_a_hedge_is_cancelled_once_a_vm_is_usable():
    booting = [vm("w1", "us-west1", VmPhase.BOOTING, since=0)]
    won = [vm("c1", "us-central1", VmPhase.BUSY, since=80, job="j0")]
    plan = ZenPlanner().plan(snap(90, vms=booting + won))
    assert plan.delete == [("us-west1", "w1")]
    racing = ZenPlanner().plan(snap(50, queued=jobs(1), vms=booting + [vm("c1", "us-central1", VmPhase.BOOTING)]))
    assert racing.delete == []  # nothing usable yet: both still race for the job
    [why] = [d.reason for d in plan.decisions if d.vm == "w1"]
    assert why.startswith("no queued job waits for it any more")  # its job ran elsewhere, or was cancelled


def test_boot_times_are_learned_per_region():
    memory = trusted()
    memory["us-west1"] = RegionMemory(last_boot_at=at(-60), booting=("w1",), booting_since=(at(0).timestamp(),),
                                      known=("w1",))
    plan = ZenPlanner().plan(snap(100, vms=[vm("w1", "us-west1", VmPhase.IDLE, since=70)], memory=memory))
    assert plan.memory["us-west1"].boot_s == 70


def test_demand_is_planned_per_group_without_walking_the_queue():
    class NoJobs(tuple):
        def __iter__(self):
            raise AssertionError("the planner walked the queued jobs")

    groups = (DemandGroup(REGIONS, 100_000, at(0)), DemandGroup(("europe-west4",), 2, at(0), priority=1))
    snapshot = replace(snap(0), queued=NoJobs(), demand=groups)
    plan = ZenPlanner().plan(snapshot)
    assert plan.add == {"europe-west4": 2, "us-central1": 4}  # priority first, then the cluster limit of 6


def test_min_vms_are_kept_and_filled():
    limits = ClusterLimits("c", REGIONS, max_vms_per_region=4, max_vms=6, min_vms=2)
    keep = ZenPlanner().plan(snap(5000, vms=[vm("a", "us-west1", VmPhase.IDLE), vm("b", "us-central1", VmPhase.IDLE)],
                                  limits=limits))
    assert keep.delete == []
    fill = ZenPlanner().plan(snap(0, limits=limits))
    assert fill.add == {"us-central1": 2}


def test_vms_booting_for_min_vms_are_not_cancelled_as_lost_races():
    """Two VMs asked for min_vms boot together; one is listed RUNNING first: the other was deleted as a boot
    that lost its race (no queued job waits for it), below min_vms, and asked for again the next pass."""
    limits = ClusterLimits("c", REGIONS, max_vms_per_region=4, max_vms=6, min_vms=2)
    planner = ZenPlanner()
    fill = planner.plan(snap(0, limits=limits))
    assert fill.add == {"us-central1": 2}
    first = replace(vm("a", "us-central1", VmPhase.BOOTING, since=1), started=True, running=True)
    second = replace(vm("b", "us-central1", VmPhase.BOOTING, since=1), started=True)
    again = planner.plan(snap(40, vms=[first, second], limits=limits, memory=fill.memory))
    assert (again.delete, again.add) == ([], {})
    extra = replace(vm("c", "us-central1", VmPhase.BOOTING, since=1), started=True)  # one more than min_vms: goes
    beyond = ZenPlanner().plan(snap(40, vms=[first, second, extra], limits=limits, memory=fill.memory))
    assert len(beyond.delete) == 1


def test_limits_per_region_and_per_cluster_are_respected():
    plan = ZenPlanner().plan(snap(0, queued=jobs(20)))
    assert plan.add == {"us-central1": 4, "us-west1": 2}  # 4 per region, 6 in all
    assert any(d.action is Action.HOLD and "cluster limit" in d.reason for d in plan.decisions)


def _at_the_limit(blocked: tuple[str, ...], now: float = 1000):
    """The cluster's 6 VMs: 3 busy in us-west1, 2 in europe-west4 and a probe waiting for capacity in
    us-central1 since 0 s (blocked until 1,500 s, like ``blocked``); one job queued at ``now``."""
    probe = vm("probe", "us-central1", VmPhase.BOOTING, since=0, error=ErrorKind.STOCKOUT)
    busy = [vm(f"w{i}", "us-west1", VmPhase.BUSY, job=f"r{i}") for i in range(3)]
    busy += [vm(f"e{i}", "europe-west4", VmPhase.BUSY, job=f"s{i}") for i in range(2)]
    vms = [probe] + busy
    memory = {r: RegionMemory(last_boot_at=at(-60), known=tuple(v.name for v in vms if v.region == r),
                              booting=("probe",) if r == "us-central1" else ()) for r in REGIONS}
    memory.update({r: replace(memory[r], blocked_until=at(1500), strikes=3, last_stockout_at=at(0)) for r in blocked})
    return snap(now, queued=jobs(1, queued_at=now - 10), vms=vms, memory=memory)


SECOND_PROBE = vm("probe-2", "us-west1", VmPhase.BOOTING, since=0, error=ErrorKind.STOCKOUT)


def _plus(snapshot: ClusterSnapshot, extra: Vm) -> ClusterSnapshot:
    """``snapshot`` with ``extra`` listed too, and remembered in its region (booting there, if it is)."""
    known = snapshot.memory[extra.region]
    known = replace(known, known=known.known + (extra.name,),
                    booting=known.booting + ((extra.name,) if extra.phase is VmPhase.BOOTING else ()))
    return replace(snapshot, vms=snapshot.vms + (extra,), memory=dict(snapshot.memory, **{extra.region: known}))


def test_at_the_cluster_limit_a_probe_gives_its_place_to_a_pool_not_stocked_out():
    snapshot = _at_the_limit(blocked=("us-central1",))
    plan = ZenPlanner().plan(snapshot)
    assert plan.add == {} and plan.delete == [("us-central1", "probe")]  # the job is asked for once it is gone
    [gone] = [d for d in plan.decisions if d.action is Action.DELETE]
    assert "gives its place" in gone.reason and "cluster limit of 6" in gone.reason
    after = ZenPlanner().plan(replace(snapshot, vms=snapshot.vms[1:], memory=plan.memory, now=at(1030),
                                      target_sizes=dict(snapshot.target_sizes, **{"us-central1": 0})))
    assert after.add == {"us-west1": 1} and after.delete == []
    roomy = ZenPlanner().plan(replace(_at_the_limit(blocked=("us-central1",)), cluster=replace(LIMITS, max_vms=7)))
    assert roomy.add == {"us-west1": 1} and roomy.delete == []  # below the limit: the probe keeps its place


def test_a_probe_keeps_its_place_when_the_held_jobs_pools_are_full_anyway():
    # The job may go to us-central1 (blocked, its probe) or us-west1, whose MIG is at max_vms_per_region:
    # a place freed under max_vms would not serve it.
    snapshot = _plus(_at_the_limit(blocked=("us-central1",)), vm("x0", "us-west1", VmPhase.BUSY, job="t0"))
    plan = ZenPlanner().plan(replace(snapshot, queued=jobs(1, regions=("us-central1", "us-west1"), queued_at=990),
                                     cluster=replace(LIMITS, max_vms=7),
                                     target_sizes=dict(snapshot.target_sizes, **{"us-west1": 4})))
    assert plan.add == {} and plan.delete == []


def test_a_probe_already_going_away_is_the_held_jobs_place():
    # Two blocked pools, a probe each; one job held at the limit: one probe goes. At the next pass it is
    # still being deleted (it counts until gone): the other keeps its place.
    snapshot = _plus(_at_the_limit(blocked=("us-central1", "us-west1")), SECOND_PROBE)
    first = replace(snapshot, cluster=replace(LIMITS, max_vms=7),
                    target_sizes=dict(snapshot.target_sizes, **{"us-west1": 4}))
    plan = ZenPlanner().plan(first)
    assert plan.add == {} and len(plan.delete) == 1
    [(_, gone)] = plan.delete
    going = tuple(replace(v, phase=VmPhase.DELETING) if v.name == gone else v for v in first.vms)
    again = ZenPlanner().plan(replace(first, vms=going, memory=plan.memory, now=at(1015)))
    assert again.add == {} and again.delete == []


def test_probes_below_the_cluster_limit_all_keep_their_places():
    snapshot = _plus(_at_the_limit(blocked=("us-central1", "us-west1")), SECOND_PROBE)
    plan = ZenPlanner().plan(replace(snapshot, cluster=replace(LIMITS, max_vms=9, max_vms_per_region=6)))
    assert plan.add == {"europe-west4": 1} and plan.delete == []  # 8 VMs with the ask: both probes stay


def test_a_probe_keeps_its_place_when_every_pool_is_stocked_out():
    plan = ZenPlanner().plan(_at_the_limit(blocked=REGIONS))
    assert plan.add == {} and plan.delete == []
    assert any(d.action is Action.HOLD and "every allowed region is stocked out" in d.reason for d in plan.decisions)


def test_job_region_allow_list_is_respected():
    plan = ZenPlanner().plan(snap(0, queued=jobs(2, regions=("europe-west4",))))
    assert plan.add == {"europe-west4": 2}


def test_when_every_allowed_region_is_out_the_job_waits_with_a_reason():
    memory = {r: RegionMemory(blocked_until=at(600), strikes=1) for r in REGIONS}
    plan = ZenPlanner().plan(snap(60, queued=jobs(1), memory=memory))
    assert plan.add == {}
    [hold] = [d for d in plan.decisions if d.action is Action.HOLD]
    assert "every allowed region is stocked out" in hold.reason


def test_higher_priority_jobs_get_the_last_slots():
    limits = ClusterLimits("c", ("us-central1",), max_vms_per_region=1, max_vms=1)
    low = QueuedJob("low", ("us-central1",), at(0), priority=0)
    high = QueuedJob("high", ("us-central1",), at(10), priority=5)
    idle = vm("a", "us-central1", VmPhase.IDLE)
    plan = ZenPlanner().plan(snap(20, queued=(low, high), vms=[idle], limits=limits))
    assert plan.add == {} and [d.action for d in plan.decisions] == [Action.HOLD]


def test_a_region_that_never_delivered_ranks_by_preference_once_its_stockout_fades_and_is_hedged():
    memory = trusted()
    memory["us-central1"] = RegionMemory(last_stockout_at=at(-600))  # stocked out, never delivered
    plan = ZenPlanner().plan(snap(4 * 3600, queued=jobs(1), memory=memory))
    asks = {d.region for d in plan.decisions if "without a VM" in d.reason}
    hedges = {d.region for d in plan.decisions if "hedge" in d.reason}
    assert asks == {"us-central1"} and hedges == {"us-west1"}  # the job goes back; its boot is insured


def test_a_jobs_own_region_order_from_data_locality_is_used_instead_of_the_clusters():
    near_data = ("europe-west4", "us-central1", "us-west1")  # zen.core.locality put its data's region first
    plan = ZenPlanner().plan(snap(0, queued=jobs(2, regions=near_data)))
    assert plan.add == {"europe-west4": 2}


def test_a_group_naming_a_region_the_cluster_no_longer_has_is_planned_in_the_others():
    plan = ZenPlanner().plan(snap(0, queued=jobs(1, regions=("us-east4", "us-west1"))))
    assert plan.add == {"us-west1": 1}


def test_the_same_vms_planned_again_plan_as_fresh_ones_and_a_boot_is_still_learned():
    """The grouping of a VM tuple is kept while the manager hands the same tuple over again
    (model.vm_index), and learn skips its boot check when nothing was booting and a region has the
    VMs it had: neither changes a plan, and a VM that boots in between is still learned from."""
    busy = vm("a", "us-central1", VmPhase.BUSY, job="j0")
    vms = (busy, vm("b", "us-west1", VmPhase.BOOTING, since=0))
    first = ZenPlanner().plan(snap(30, queued=jobs(1), vms=vms))
    again = ZenPlanner().plan(snap(60, queued=jobs(1), vms=vms, memory=first.memory))  # the same tuple
    fresh = ZenPlanner().plan(snap(60, queued=jobs(1), vms=list(vms), memory=first.memory))  # an equal one
    assert (again.add, again.delete, again.decisions, again.memory) == (
        fresh.add, fresh.delete, fresh.decisions, fresh.memory)
    booted = ZenPlanner().plan(snap(90, vms=(busy, vm("b", "us-west1", VmPhase.IDLE, since=90)), memory=again.memory))
    assert booted.memory["us-west1"].boot_s == 90  # asked at 0, usable at 90
    assert booted.memory["us-central1"].replaced(gang_room_at=None) == again.memory["us-central1"].replaced(
        gang_room_at=None)  # nothing booted there (the pass's time is all that changed)
    assert RegionMemory(strikes=1).replaced(strikes=2, boot_s=5.0) == replace(RegionMemory(strikes=1), strikes=2,
                                                                             boot_s=5.0)


def test_a_surplus_boot_where_jobs_still_wait_is_not_said_to_have_lost_a_race():
    """Its job was cancelled while other jobs wait for the same regions: the VM went with the reason "lost
    the race: another VM is already usable", though it raced nobody. The reason now holds either way."""
    booting = [vm("w1", "us-west1", VmPhase.BOOTING, since=0)]
    usable = [vm("c1", "us-central1", VmPhase.IDLE, since=80)]  # takes the one job that waits
    plan = ZenPlanner().plan(snap(90, queued=jobs(1), vms=booting + usable))
    assert plan.delete == [("us-west1", "w1")]
    [why] = [d.reason for d in plan.decisions if d.vm == "w1"]
    assert why.startswith("no queued job needs it: a VM usable since it was asked serves them") and "lost" not in why.split(":")[0]
