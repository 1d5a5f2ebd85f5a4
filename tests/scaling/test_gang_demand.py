"""Gangs as the planner's demand (zen.scaling.gangs): N VMs of one pool at once, never a gang spread over
regions, a pool that can give only part of a gang out for it, hedges of whole gangs; ordinary jobs'
plans unchanged. Pure: hand-built snapshots, as tests/scaling/test_planner.py."""

from __future__ import annotations

from dataclasses import replace

from tests.scaling.test_planner import CAUTIOUS, LIMITS, REGIONS, at, jobs, snap, trusted, vm
from zen.scaling.model import Action, ClusterLimits, DemandGroup, ErrorKind, RegionMemory, Timing, VmPhase
from zen.scaling.planner import ZenPlanner


def gangs(count: int, nodes: int, regions=REGIONS, claimed: int = 0) -> DemandGroup:
    return DemandGroup(tuple(regions), count * nodes - claimed, at(0), gang=nodes)


def plan_for(*groups, vms=(), limits=LIMITS, timing=CAUTIOUS, memory=None):
    return ZenPlanner().plan(replace(snap(0, vms=vms, limits=limits, timing=timing, memory=memory), demand=groups))


def test_a_gang_is_asked_for_whole_in_one_region_with_one_spare_boot():
    plan = plan_for(gangs(1, 3))
    assert plan.add == {"us-central1": 4} and plan.together == {"us-central1": [3]}  # the spare is no part of the unit
    assert [(d.region, d.count, d.reason) for d in plan.decisions if d.action is Action.ADD] == [
        ("us-central1", 3, "3 VM(s) for 1 queued gang(s)"),
        ("us-central1", 1, "1 spare boot(s): a job starts at the first of its two boots, a gang at its N-th of N+1")]


def test_an_ask_for_jobs_and_gangs_counts_each_gang_once():
    """The ADD's reason counted a gang's VMs as that many "queued job(s)": jobs and gangs are told apart."""
    one = DemandGroup(("us-central1",), 1, at(0))
    plan = plan_for(one, gangs(1, 2, regions=("us-central1",)), limits=replace(LIMITS, max_vms_per_region=3))
    assert [(d.count, d.reason) for d in plan.decisions if d.action is Action.ADD] == [
        (3, "1 queued job(s) without a VM, 2 VM(s) for 1 queued gang(s)")]


def test_a_region_that_can_give_only_part_of_a_gang_is_out_for_it():
    busy = [vm(f"b{i}", "us-central1", VmPhase.BUSY, job=f"x{i}") for i in range(2)]  # 2 of its 4 slots taken
    plan = plan_for(gangs(1, 3), vms=busy)
    assert plan.add == {"us-west1": 4}  # not 2 in us-central1 and 1 elsewhere (3 and its spare boot)
    ordinary = ZenPlanner().plan(snap(0, queued=jobs(3), vms=busy))
    assert ordinary.add == {"us-central1": 2, "us-west1": 1}  # ordinary jobs still spread as before


def test_two_gangs_never_share_one_between_regions():
    plan = plan_for(gangs(2, 3))  # 6 VMs; 4 fit per region: one gang each
    assert plan.add == {"us-central1": 3, "us-west1": 3}


def test_idle_vms_cover_a_gang_only_where_the_whole_gang_is_idle():
    idle = [vm("a", "us-central1", VmPhase.IDLE), vm("b", "us-west1", VmPhase.IDLE), vm("c", "us-west1", VmPhase.IDLE)]
    plan = plan_for(gangs(1, 2), vms=idle)
    assert plan.add == {}  # us-west1's two idle VMs take it
    plan = plan_for(gangs(1, 3), vms=idle)
    assert plan.add == {"us-west1": 1}  # no region has 3: completed where the most are idle


def test_a_gang_partly_claimed_needs_only_its_missing_nodes():
    assert plan_for(gangs(1, 4, claimed=3)).add == {"us-central1": 1}


def test_gangs_missing_different_numbers_of_nodes_are_each_asked_theirs():
    """Two gangs of 4 assembling in us-central1, one with 3 nodes claimed and one with 1, and room for 3
    more: the first gets its last VM, the second waits for room; as one "gang of 4" neither would (no pool
    has room for 4). With room for 4, each gets its own."""
    held = [vm(f"a{i}", "us-central1", VmPhase.BUSY) for i in range(3)] + [vm("b0", "us-central1", VmPhase.BUSY)]
    one, three = (DemandGroup(("us-central1",), need, at(0), gang=4, part=need) for need in (1, 3))
    for room, asked in ((3, [1]), (4, [1, 3])):
        limits = ClusterLimits("c", ("us-central1", "us-west1"), max_vms_per_region=4 + room, max_vms=20)
        plan = plan_for(one, three, vms=held, limits=limits)
        assert plan.together == {"us-central1": asked}


def test_a_gang_no_pool_can_hold_waits_with_a_reason():
    limits = ClusterLimits("c", REGIONS, max_vms_per_region=2, max_vms=6)
    plan = plan_for(gangs(1, 3), limits=limits)
    assert plan.add == {}
    [hold] = [d for d in plan.decisions if d.action is Action.HOLD]
    assert "no allowed pool has room for the 3 VM(s) a gang of 3 needs" in hold.reason
    assert hold.count == 1 and hold.reason.startswith("1 job(s) wait")  # one job: it counted its 3 VMs as 3 jobs


def test_a_gang_whose_pools_are_all_stocked_out_is_told_so():
    """It was told no pool had room for its VMs (max_vms_per_region, max_vms, quota): none was full."""
    memory = {r: RegionMemory(strikes=1, blocked_until=at(500), last_stockout_at=at(-10)) for r in REGIONS}
    probes = [vm(f"p{i}", r, VmPhase.BOOTING, since=-10, error=ErrorKind.STOCKOUT) for i, r in enumerate(REGIONS)]
    plan = plan_for(gangs(2, 3), vms=probes, memory=memory)
    [hold] = [d for d in plan.decisions if d.action is Action.HOLD]
    assert hold.count == 2 and "every allowed region is stocked out" in hold.reason and "room" not in hold.reason, hold


def test_a_gang_is_hedged_whole_or_not_at_all():
    limits = ClusterLimits("c", REGIONS, max_vms_per_region=4, max_vms=6)
    plan = plan_for(gangs(1, 3), limits=limits, memory={}, timing=Timing())  # every region cold: hedged
    assert plan.add == {"us-central1": 3, "us-west1": 3}
    tight = ClusterLimits("c", REGIONS, max_vms_per_region=4, max_vms=5)
    plan = plan_for(gangs(1, 3), limits=tight, memory={}, timing=Timing())
    assert plan.add == {"us-central1": 4}  # no room for 3 more; room for the spare boot, asked after the hedges


def test_a_gang_is_completed_where_a_spare_vm_would_claim_its_first_part():
    """An idle VM claims a part as soon as the start comes and the gang then assembles in its region: the
    rest is asked for there, not a whole gang elsewhere (which would boot for nothing)."""
    idle = [vm("w", "us-west1", VmPhase.IDLE)]
    plan = plan_for(gangs(1, 3), vms=idle)
    assert plan.add == {"us-west1": 3} and plan.delete == []  # the idle VM is kept for the gang; 2 boots and a spare
    full = [vm(f"b{i}", "us-west1", VmPhase.BUSY, job=f"x{i}") for i in range(3)]  # us-west1: room for 0 more
    plan = plan_for(gangs(1, 3), vms=idle + full, limits=ClusterLimits("c", REGIONS, max_vms_per_region=4, max_vms=10))
    assert plan.add == {"us-central1": 4}  # where the whole gang fits (3 and its spare boot)


def test_each_gang_asked_for_and_each_gang_hedge_is_a_unit_of_the_plan_and_ordinary_jobs_none():
    plan = plan_for(gangs(2, 2))
    assert plan.add == {"us-central1": 4} and plan.together == {"us-central1": [2, 2]}
    assert plan_for(gangs(1, 4, claimed=3)).together == {"us-central1": [1]}  # only its missing node asked for
    limits = ClusterLimits("c", REGIONS, max_vms_per_region=4, max_vms=6)
    hedged = plan_for(gangs(1, 3), limits=limits, memory={}, timing=Timing())
    assert hedged.together == {"us-central1": [3], "us-west1": [3]}
    assert ZenPlanner().plan(snap(0, queued=jobs(3))).together == {}


def test_each_pass_remembers_what_a_gang_assembling_in_each_pool_could_still_get():
    # us-central1: 2 parts of a gang (busy to the planner), 1 busy job, 1 idle VM: at its limit of 4, so a
    # gang there gets the idle VM and no more; us-west1: one VM booting, room for 3 more; europe-west4: 4.
    vms = [vm(f"p{i}", "us-central1", VmPhase.BUSY, job="g") for i in range(2)]
    vms += [vm("b", "us-central1", VmPhase.BUSY, job="x"), vm("i", "us-central1", VmPhase.IDLE),
            vm("w", "us-west1", VmPhase.BOOTING)]
    plan = plan_for(gangs(1, 4, regions=("us-central1",), claimed=2), vms=vms, limits=replace(LIMITS, max_vms=12))
    assert {r: m.gang_room for r, m in plan.memory.items()} == {"us-central1": 1, "us-west1": 4, "europe-west4": 4}
    assert any(d.action is Action.HOLD for d in plan.decisions)  # the gang's rest does not fit: the tick releases it


def test_vms_asked_for_but_not_listed_yet_count_in_a_gangs_room():
    # us-central1's MIG was resized to 4 for a gang (2 parts claimed); only one of the 2 new VMs is listed
    # yet: the other is on its way, not missing room.
    vms = [vm(f"p{i}", "us-central1", VmPhase.BUSY, job="g") for i in range(2)]
    vms.append(vm("n", "us-central1", VmPhase.BOOTING))
    plan = ZenPlanner().plan(replace(snap(0, vms=vms, limits=replace(LIMITS, max_vms=12),
                                          targets={"us-central1": 4, "us-west1": 0, "europe-west4": 0}),
                                     demand=(gangs(1, 4, regions=("us-central1",), claimed=2),)))
    assert plan.memory["us-central1"].gang_room == 2 and plan.add == {}


def test_a_spare_boot_only_where_a_gang_needs_two_or_more_boots():
    idle = [vm("a", "us-west1", VmPhase.IDLE), vm("b", "us-west1", VmPhase.IDLE)]
    assert plan_for(gangs(1, 3), vms=idle).add == {"us-west1": 1}  # one boot: no race to shorten
    assert plan_for(gangs(1, 4, claimed=3)).add == {"us-central1": 1}
    assert plan_for(gangs(1, 4, claimed=2)).add == {"us-central1": 3}


def test_spare_boots_never_take_a_place_a_job_needs():
    assert plan_for(gangs(2, 3)).add == {"us-central1": 3, "us-west1": 3}  # max_vms 6: two gangs, no spare
    mixed = plan_for(gangs(1, 3), DemandGroup(REGIONS, 2, at(1)))  # 4 a region, 6 in all
    assert mixed.add == {"us-central1": 4, "us-west1": 1}  # the gang's 3, the jobs' 2; no room left for a spare
    assert not [d for d in mixed.decisions if "spare" in d.reason]


def test_a_gangs_spare_boot_stays_in_the_race_until_the_gang_is_whole():
    # Four VMs booting for a gang of 3 (3 and its spare), one listed RUNNING already, and a VM usable since
    # they were asked (it took another job): while the gang waits, none of the four lost its race.
    limits = replace(LIMITS, max_vms=12, max_vms_per_region=6)
    booting = [vm(f"n{i}", "us-central1", VmPhase.BOOTING, since=0) for i in range(4)]
    booting[0] = replace(booting[0], running=True, started=True)
    other = vm("o", "us-central1", VmPhase.BUSY, since=20, job="x")

    def plan(vms, *groups):
        return ZenPlanner().plan(replace(snap(60, vms=vms, limits=limits), demand=groups))

    assert (plan(booting + [other], gangs(1, 3)).add, plan(booting + [other], gangs(1, 3)).delete) == ({}, [])
    part = replace(booting[0], phase=VmPhase.BUSY, job_id="g", running=False, since=at(50))  # 1 claimed, 2 to go
    waiting = plan([part] + booting[1:] + [other], gangs(1, 3, claimed=1))
    assert (waiting.add, waiting.delete) == ({}, [])
    # The gang whole (its parts busy, no demand left): the spare, still booting, lost its race.
    whole = [replace(v, phase=VmPhase.BUSY, job_id="g", running=False, since=at(55)) for v in booting[:3]]
    assert plan(whole + [booting[3], other]).delete == [("us-central1", "n3")]


def test_a_spare_counted_for_one_gang_still_completes_another_in_the_same_pass():
    limits = replace(LIMITS, max_vms=12, max_vms_per_region=6)
    first = DemandGroup(("us-central1",), 3, at(0), gang=3)  # covered by 4 boots: 3 and its spare
    second = DemandGroup(("us-central1",), 2, at(5), gang=3)  # one node claimed there: 2 to go
    vms = [vm(f"a{i}", "us-central1", VmPhase.BOOTING, since=1) for i in range(4)]
    vms.append(vm("p", "us-central1", VmPhase.BUSY, since=3, job="second"))
    plan = ZenPlanner().plan(replace(snap(10, vms=vms, limits=limits), demand=(first, second)))
    assert plan.add == {"us-central1": 1}  # the spare and one place more: not held for room


def test_a_gangs_hedge_is_the_whole_gang_where_its_first_pool_had_some_of_it():
    idle = [vm("w", "us-central1", VmPhase.IDLE)]
    plan = plan_for(gangs(1, 3), vms=idle, limits=replace(LIMITS, max_vms=12), memory={}, timing=Timing())  # cold: hedged
    assert plan.together == {"us-central1": [2], "us-west1": [3]}  # not 2 in us-west1, where no part is
    assert plan.add == {"us-central1": 3, "us-west1": 4}  # and a spare boot with each


def test_an_unclaimed_gangs_hedge_copy_races_on_while_no_demand_waits_for_a_place():
    # A gang of 3 whose first pool is uncertain: 4 VMs booting in us-central1 (3 and its spare), 4 in
    # us-west1 (its hedge copy and the copy's spare), and a VM usable since they were asked (it took
    # another job): the copy is still in the race, spare included.
    limits = replace(LIMITS, max_vms=12, max_vms_per_region=6)
    booting = [vm(f"c{i}", "us-central1", VmPhase.BOOTING, since=0) for i in range(4)]
    booting += [vm(f"w{i}", "us-west1", VmPhase.BOOTING, since=0) for i in range(4)]
    other = vm("o", "us-west1", VmPhase.BUSY, since=20, job="x")
    memory = {r: replace(m, last_stockout_at=at(-600)) for r, m in trusted(REGIONS).items()}  # a risk: hedged

    def plan(*groups, vms=booting + [other]):
        return ZenPlanner().plan(replace(snap(60, vms=vms, limits=limits, memory=memory, timing=Timing()),
                                         demand=groups))

    assert plan(gangs(1, 3)).delete == []
    # Where the planner would not hedge the gang (its first pool trusted), those VMs are no copy of it but
    # boots that lost their races: they go.
    trusting = ZenPlanner().plan(replace(snap(60, vms=booting + [other], limits=limits), demand=(gangs(1, 3),)))
    assert sorted(region for region, _ in trusting.delete) == ["us-west1"] * 4
    # Demand waiting for a place (a job that may run in europe-west4 only, where the limits leave none):
    # places are worth more, the copy and the spare go (lost races: a VM became usable since).
    full = [vm(f"e{i}", "europe-west4", VmPhase.BUSY, since=0, job=f"y{i}") for i in range(6)]
    waiting = plan(gangs(1, 3), DemandGroup(("europe-west4",), 1, at(30)), vms=booting + [other] + full)
    assert sorted(region for region, _ in waiting.delete) == ["us-central1"] + ["us-west1"] * 4
    # A node claimed in us-central1 (the gang's region fixed): the copy lost.
    claimed = plan(gangs(1, 3, regions=("us-central1",), claimed=1))
    assert sorted(name for _, name in claimed.delete) == ["w0", "w1", "w2", "w3"]


def test_at_the_cluster_limit_a_probe_gives_its_place_to_a_gang_only_max_vms_holds():
    """A gang whose pool has room but for ``max_vms``, which a probe waiting on a stocked-out pool holds: the
    probe gives way, as for a job (it did not: the gang waited as long as the stockout lasted)."""
    from tests.scaling.test_planner import _at_the_limit

    snapshot = _at_the_limit(blocked=("us-central1",))  # 6 VMs: the probe, 3 busy in us-west1, 2 in europe-west4
    gang = DemandGroup(("us-central1", "europe-west4"), 2, at(990), gang=2)
    plan = ZenPlanner().plan(replace(snapshot, cluster=replace(LIMITS, max_vms=7), demand=(gang,), queued=()))
    assert plan.add == {} and plan.delete == [("us-central1", "probe")]
    held = ZenPlanner().plan(replace(snapshot, cluster=replace(LIMITS, max_vms=7, max_vms_per_region=3),
                                     demand=(gang,), queued=()))
    assert held.delete == []  # its pool has room for 1 more: a place freed under max_vms would not serve it
