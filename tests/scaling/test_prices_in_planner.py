"""The planner with priced pools: the cheapest pool within the time slack, hedges near its price, a spare
boot racing in the same pool, the reason naming the prices, losers ended at RUNNING, flex-start's queue,
and preemptions' learned cost."""

from __future__ import annotations

import math
from dataclasses import replace

from zen.scaling import preemptions
from zen.scaling.model import ClusterLimits, ErrorKind, MigError, Pool, QueuedJob, RegionMemory, Timing, Vm, VmPhase
from zen.scaling.planner import ZenPlanner

from tests.scaling.test_planner import at, snap, trusted

POOLS = {"us-central1": Pool("us-central1", "spot", 2.37), "us-central1/standard": Pool("us-central1", "standard", 5.92),
         "us-west1": Pool("us-west1", "spot", 2.04), "us-west1/standard": Pool("us-west1", "standard", 5.92),
         "europe-west4": Pool("europe-west4", "spot", 2.61)}
LIMITS = ClusterLimits("8xa100", tuple(POOLS), max_vms_per_region=4, max_vms=12, pools=POOLS)


def queued(n: int, pools=tuple(POOLS), queued_at: float = 0, max_wait_s=None) -> tuple[QueuedJob, ...]:
    return tuple(QueuedJob(f"j{i}", pools, at(queued_at), max_wait_s=max_wait_s) for i in range(n))


def plan(now=0.0, jobs=(), vms=(), memory=None, timing=Timing(hedge_risk=0.5), limits=LIMITS):
    return ZenPlanner().plan(snap(now, queued=jobs, vms=vms, memory=memory or trusted(limits.regions),
                                  limits=limits, timing=timing))


def asked(result) -> dict[str, int]:
    """The pools asked for queued jobs (neither hedges nor spare boots)."""
    return {d.region: d.count for d in result.decisions
            if d.action.value == "ADD" and "queued job(s) without a VM" in d.reason}


def test_the_cheapest_pool_within_the_slack_wins_and_its_reason_names_the_prices():
    result = plan(jobs=queued(2))
    assert asked(result) == {"us-west1": 2}  # $2.04 spot beats the preferred region's $2.37
    [decision] = [d for d in result.decisions if d.action.value == "ADD" and "spare" not in d.reason]
    assert decision.reason.startswith("2 queued job(s) without a VM: $2.04/h (spot), before us-central1 $2.37/h (spot)")
    # A pool expected much slower (a recent stockout's risk: 240 s more) is outside the 120 s slack.
    memory = trusted(LIMITS.regions)
    memory["us-west1"] = RegionMemory(last_boot_at=at(-4000), last_stockout_at=at(-10))
    assert asked(plan(jobs=queued(1), memory=memory)) == {"us-central1": 1}


def reasons(result) -> dict[str, str]:
    return {d.region: d.reason for d in result.decisions
            if d.action.value == "ADD" and "queued job(s) without a VM" in d.reason}


def test_the_reason_names_the_figures_the_pools_were_ranked_by_and_the_pools_passed_over():
    """Each reason said only "$X/h, before <the rest of the ranking>": a pool asked because the cheaper one was
    full read as ranked before it; a spot pool whose preemptions make it dearer per useful hour read as cheaper
    than the standard pool chosen over it; past its start bound, prices cheaper than the choice read as beaten."""
    at_limit = reasons(plan(jobs=queued(5)))  # us-west1 ($2.04) holds 4 (max_vms_per_region), the fifth goes on
    assert at_limit["us-west1"].startswith("4 queued job(s) without a VM: $2.04/h (spot), before us-central1 $2.37/h")
    assert at_limit["us-central1"].startswith(
        "1 queued job(s) without a VM: $2.37/h (spot), after us-west1 $2.04/h (spot) with no room, before ")

    pools = {"us-central1": Pool("us-central1", "spot", 2.0), "us-central1/standard": Pool("us-central1", "standard", 5.0)}
    limits = ClusterLimits("c", tuple(pools), 4, 8, pools=pools)
    memory = dict(trusted(limits.regions), **{"us-central1": RegionMemory(
        last_boot_at=at(-60), preempted=10.0, lost_s=36000.0, busy_s=36000.0)})
    timing = Timing(hedge_risk=0.5)
    factor = preemptions.cost_factor(memory["us-central1"], None, timing.boot_estimate_s, at(0).timestamp(), timing.trust_s)
    [(pool, reason)] = reasons(plan(jobs=queued(1, tuple(pools)), memory=memory, limits=limits, timing=timing)).items()
    assert pool == "us-central1/standard" and reason == (
        f"1 queued job(s) without a VM: $5.00/h (standard), before us-central1 $2.00/h (spot; ${2.0 * factor:.2f}/h "
        "with its preemptions)")

    slow = dict(trusted(LIMITS.regions), **{"us-west1": RegionMemory(last_boot_at=at(-60), boot_s=300)})
    [(pool, reason)] = reasons(plan(now=700, jobs=queued(1, max_wait_s=600), memory=slow)).items()
    assert pool == "us-central1" and reason.startswith(
        "1 queued job(s) without a VM: $2.37/h (spot), fastest first (past its start bound), before ")
    assert "us-west1 $2.04/h (spot, slower)" in reason


def test_past_its_start_bound_a_group_ranks_by_speed_and_a_named_bound_widens_the_choice():
    slow = dict(trusted(LIMITS.regions), **{"us-west1": RegionMemory(last_boot_at=at(-60), boot_s=300)})
    assert asked(plan(jobs=queued(1), memory=slow)) == {"us-central1": 1}  # 300 s boot: beyond the slack
    assert asked(plan(jobs=queued(1, max_wait_s=900), memory=slow)) == {"us-west1": 1}  # it may wait for the cheapest
    assert asked(plan(now=700, jobs=queued(1, max_wait_s=600), memory=slow)) == {"us-central1": 1}  # past it


def test_a_hedge_goes_only_to_a_pool_near_the_first_choices_price():
    # Nothing delivered yet: every pool is uncertain and hedged, but not into standard (2.9x spot).
    memory = {r: RegionMemory() for r in LIMITS.regions}
    result = plan(jobs=queued(1), memory=memory, timing=Timing())
    assert result.add == {"us-west1": 2, "us-central1": 1}  # the first choice and its spare boot; the hedge
    assert not any("/standard" in pool for pool in result.add)


def test_a_job_races_a_spare_boot_in_its_own_pool_unless_a_pool_of_its_is_blocked():
    result = plan(jobs=queued(2))
    assert result.add == {"us-west1": 4}  # each job's first boot and its spare, both at $2.04
    assert [(d.count, d.reason.split(":")[0]) for d in result.decisions if d.action.value == "ADD"] == [
        (2, "2 queued job(s) without a VM"), (2, "2 spare boot(s)")]
    # Where a pool of the job's is blocked (a stockout: places are short), no spare takes one.
    memory = trusted(LIMITS.regions)
    memory["europe-west4"] = RegionMemory(blocked_until=at(600), strikes=1, last_stockout_at=at(-5))
    assert plan(jobs=queued(2), memory=memory).add == {"us-west1": 2}
    # Nor where the limits leave no room for one (max_vms_per_region 4: four jobs, four first boots).
    assert plan(jobs=queued(5)).add == {"us-west1": 4, "us-central1": 2}  # and the fifth's spare there
    # Nor where a GPU quota has room for one VM and not two (the tick's read), nor where the configuration
    # turns spares off.
    assert plan(jobs=queued(1), memory=trusted(LIMITS.regions)).add == {"us-west1": 2}
    tight = ZenPlanner().plan(replace(snap(0, queued=queued(1), memory=trusted(LIMITS.regions), limits=LIMITS,
                                           timing=Timing(hedge_risk=0.5)), quota_room={"us-west1": 1}))
    assert tight.add == {"us-west1": 1}
    assert plan(jobs=queued(1), timing=Timing(hedge_risk=0.5, spare_boots=False)).add == {"us-west1": 1}
    # A pool without a price in a priced cluster: no spare either.
    mixed = dict(POOLS, **{"us-west1": Pool("us-west1", "spot", None)})
    limits = ClusterLimits("8xa100", tuple(mixed), 4, 12, pools=mixed)
    assert plan(jobs=queued(1, ("us-west1",)), limits=limits).add == {"us-west1": 1}
    # Unpriced pools (a hedge to any region is no dearer): no spare.
    unpriced = ClusterLimits("8xa100", ("us-central1", "us-west1"), 4, 12)
    assert plan(jobs=queued(1, ("us-central1", "us-west1")), limits=unpriced).add == {"us-central1": 1}


def test_a_running_vm_ends_a_boot_asked_before_it_got_capacity():
    # One job, two boots (the first choice and its hedge); us-west1's is RUNNING: us-central1's goes
    # now, before it is billed, not when the winner's agent first speaks.
    winner = Vm("w", "us-west1", VmPhase.BOOTING, at(0), started=True, running=True)
    loser = Vm("l", "us-central1", VmPhase.BOOTING, at(0), started=False)
    result = plan(now=30, jobs=queued(1), vms=(winner, loser))
    assert ("us-central1", "l") in result.delete and ("us-west1", "w") not in result.delete
    # Without a RUNNING VM both race on.
    racing = plan(now=30, jobs=queued(1), vms=(replace(winner, running=False), loser))
    assert not racing.delete


def test_a_running_vm_ends_the_dearest_losing_boot_first():
    # One job raced three boots: its first choice and spare in us-west1 ($2.04), a hedge in us-central1
    # ($2.37). The first choice is RUNNING: it wins one race, and the hedge, the dearer, goes now, unbilled;
    # the spare goes once the winner is usable (or the next RUNNING VM ends it).
    winner = Vm("w1", "us-west1", VmPhase.BOOTING, at(0), started=True, running=True)
    spare = Vm("w2", "us-west1", VmPhase.BOOTING, at(0), started=True)
    hedge = Vm("c1", "us-central1", VmPhase.BOOTING, at(0), started=True)
    assert plan(now=30, jobs=queued(1), vms=(winner, spare, hedge)).delete == [("us-central1", "c1")]
    usable = replace(winner, phase=VmPhase.IDLE, since=at(40), running=False)
    assert plan(now=45, jobs=(), vms=(usable, spare)).delete == [("us-west1", "w2")]


def test_a_flex_start_pool_waits_its_queue_and_serves_when_every_other_pool_is_out():
    pools = {"us-central1": Pool("us-central1", "spot", 2.37), "us-central1/flex-start": Pool("us-central1", "flex-start", 3.0)}
    limits = ClusterLimits("8xa100", tuple(pools), 4, 8, pools=pools)
    memory = {"us-central1": RegionMemory(last_boot_at=at(-60)), "us-central1/flex-start": RegionMemory()}
    assert plan(jobs=queued(1, tuple(pools)), memory=memory, limits=limits).add == {"us-central1": 2}  # and its spare
    memory["us-central1"] = RegionMemory(blocked_until=at(600), strikes=1, last_stockout_at=at(-5))
    assert plan(jobs=queued(1, tuple(pools)), memory=memory, limits=limits).add == {"us-central1/flex-start": 1}
    # A request waiting 10 minutes for its grant is not stuck (twice the 900 s estimate is its deadline).
    waiting = Vm("f", "us-central1/flex-start", VmPhase.BOOTING, at(0))
    later = plan(now=600, jobs=queued(1, tuple(pools)), vms=(waiting,), memory=memory, limits=limits)
    assert not later.delete and not later.add


def test_preemptions_are_learned_per_pool_and_priced_in():
    timing = Timing()
    memory = RegionMemory()
    busy = (Vm("a", "p", VmPhase.BUSY, at(0)), Vm("b", "p", VmPhase.BUSY, at(0)))
    memory = preemptions.learn(memory, busy, at(0), timing)
    assert memory.busy == ("a", "b")
    assert preemptions.learn(memory, busy, at(10), timing) is memory  # nothing changed: the same memory
    # At 3600 s "a" finished (idle) and "b" was taken back (recreated, booting): one preemption, 3600 s lost.
    after = (Vm("a", "p", VmPhase.IDLE, at(3600)), Vm("b", "p", VmPhase.BOOTING, at(3600)))
    memory = preemptions.learn(memory, after, at(3600), timing)
    assert memory.preempted == 1 and memory.lost_s == 3600 and memory.busy_s == 7200 and memory.run_s == 3600
    # Paid per useful: 7200 / (7200 - 3600 lost - 120 boot); with checkpoints every 600 s, only 300 s lost.
    # (No VM is busy now, and no prior.)
    assert preemptions.cost_factor(memory, None, 120, 3600, 0) == 7200 / (7200 - 3720)
    assert preemptions.cost_factor(memory, 600, 120, 3600, 0) == 7200 / (7200 - 420)
    assert preemptions.cost_factor(RegionMemory(), None, 120, 3600, 3600) == 1.0


def test_a_pools_first_drop_counts_the_runs_still_going_and_its_evidence_fades_to_the_prior():
    timing = Timing()
    # Six VMs busy from 0; at 1800 s two were taken back (recreated): nothing had finished yet.
    busy = tuple(Vm(name, "p", VmPhase.BUSY, at(0)) for name in "abcdef")
    memory = preemptions.learn(RegionMemory(), busy, at(0), timing)
    after = tuple(Vm(n, "p", VmPhase.BOOTING if n in "ab" else VmPhase.BUSY, at(0 if n in "cdef" else 1800))
                  for n in "abcdef")
    memory = preemptions.learn(memory, after, at(1800), timing)
    assert memory.preempted == 2 and memory.busy_s == 3600 and memory.lost_s == 3600
    # Finished runs alone: every busy second lost, the cap (20x). Counting the four runs still going
    # (4 x 1800 s survived) and the prior (one VM for trust_s): (3600 + 7200 + 3600) / (14400 - 3600 lost - 2 x 120 boots).
    now_s = at(1800).timestamp()
    assert preemptions.cost_factor(memory.replaced(busy=(), busy_since=()), None, 120, now_s, 0.0) == 20.0
    counted = preemptions.cost_factor(memory, None, 120, now_s, timing.trust_s)
    assert counted == 14400 / (14400 - 3840)
    # The evidence decays with trust_s while the prior stays: a pool no longer asked for comes back
    # towards its price (the old ratio, kept, would have stayed where it was).
    faded = memory.replaced(busy=(), busy_since=(), busy_s=memory.busy_s * 0.05, lost_s=memory.lost_s * 0.05,
                            preempted=memory.preempted * 0.05)
    assert 1.0 < preemptions.cost_factor(faded, None, 120, now_s, timing.trust_s) < 1.1


def test_a_vm_retired_after_its_job_is_no_preemption():
    timing = Timing()
    memory = preemptions.learn(RegionMemory(), (Vm("a", "p", VmPhase.BUSY, at(0)),), at(0), timing)
    retired = preemptions.learn(memory, (Vm("a", "p", VmPhase.DELETING, at(600), retiring=True),), at(600), timing)
    assert (retired.preempted, retired.run_s) == (0, 600)
    taken = preemptions.learn(memory, (Vm("a", "p", VmPhase.DELETING, at(600)),), at(600), timing)
    assert (taken.preempted, taken.lost_s) == (1, 600)


def test_a_vm_that_took_another_job_between_passes_loses_only_the_job_it_holds_when_taken_back():
    timing = Timing()
    memory = preemptions.learn(RegionMemory(), (Vm("a", "p", VmPhase.BUSY, at(0), job_id="j1"),), at(0), timing)
    # j1 ended and the agent claimed j2 before the next pass looked: j1 is a finished run of 1800 s.
    memory = preemptions.learn(memory, (Vm("a", "p", VmPhase.BUSY, at(0), job_id="j2"),), at(1800), timing)
    assert (memory.busy_jobs, memory.busy_since, memory.run_s, memory.preempted) == (("j2",), (at(1800).timestamp(),), 1800, 0)
    # Taken back at 2400 s: j2's 600 s are lost, not the VM's 2400 s busy (keyed by the VM alone, they were).
    taken = preemptions.learn(memory, (Vm("a", "p", VmPhase.BOOTING, at(2400)),), at(2400), timing)
    assert (taken.preempted, taken.lost_s) == (1, 600)
    assert taken.busy_s == memory.busy_s * math.exp(-600 / timing.trust_s) + 600
    # A memory stored before jobs were kept, or a job not known at the last pass (its claim's): the run goes on,
    # whatever job the VM holds now, and that job is kept.
    stored = RegionMemory(busy=("a",), busy_since=(at(0).timestamp(),))
    for known in (stored, stored.replaced(busy_jobs=(None,))):
        kept = preemptions.learn(known, (Vm("a", "p", VmPhase.BUSY, at(0), job_id="j9"),), at(60), timing)
        assert (kept.busy_since, kept.busy_jobs, kept.busy_s, kept.run_s) == (stored.busy_since, ("j9",), 0.0, None)


def test_a_gang_takes_a_flex_start_pool_whole_when_every_other_pool_is_out():
    """A gang's N VMs from a flex-start pool are one ask of N (FlexStartMig.resize makes it one resize request,
    granted all at once: tests/scaling/test_flex_start_mig.py), never part there and part in another pool."""
    from zen.scaling.model import DemandGroup

    pools = {"us-central1": Pool("us-central1", "spot", 2.37), "us-central1/flex-start": Pool("us-central1", "flex-start", 3.0)}
    limits = ClusterLimits("8xa100", tuple(pools), 4, 8, pools=pools)
    memory = {"us-central1": RegionMemory(blocked_until=at(600), strikes=1, last_stockout_at=at(-5)),
              "us-central1/flex-start": RegionMemory()}
    gang = DemandGroup(tuple(pools), 3, at(0), gang=3)
    snapshot = replace(snap(0, memory=memory, limits=limits, timing=Timing(hedge_risk=0.5)), demand=(gang,))
    assert ZenPlanner().plan(snapshot).add == {"us-central1/flex-start": 3}


def test_a_boot_no_job_needs_gives_its_place_to_a_job_max_vms_holds():
    # max_vms 2: j1 (us-west1 only) raced a boot and its spare; j2 (us-central1 only) finds no place. The
    # boot j1 does not need, not RUNNING yet (unbilled), goes now for j2, without waiting for a race.
    limits = ClusterLimits("8xa100", tuple(POOLS), 4, 2, pools=POOLS)
    first = Vm("w1", "us-west1", VmPhase.BOOTING, at(0), started=True)
    spare = Vm("w2", "us-west1", VmPhase.BOOTING, at(0), started=True)
    j1 = QueuedJob("j1", ("us-west1",), at(0))
    j2 = QueuedJob("j2", ("us-central1",), at(5))
    result = plan(now=10, jobs=(j1, j2), vms=(first, spare), limits=limits)
    assert len(result.delete) == 1 and result.delete[0][0] == "us-west1"
    assert any("a job waits for a place under the cluster's max_vms" in d.reason for d in result.decisions)
    # As many as jobs wait, less the places already being freed: one VM going away gives j2 its place.
    going = Vm("old", "europe-west4", VmPhase.DELETING, at(0))
    limits3 = ClusterLimits("8xa100", tuple(POOLS), 4, 3, pools=POOLS)
    assert not plan(now=10, jobs=(j1, j2), vms=(first, spare, going), limits=limits3).delete
    # Without a job held for a place, the race runs on; nor does a job a pool's own limit holds take one
    # from another pool (max_vms_per_region 1: us-central1 is full, the cluster is not).
    assert not plan(now=10, jobs=(j1,), vms=(first, spare), limits=limits).delete
    per_region = ClusterLimits("8xa100", tuple(POOLS), 1, 12, pools=POOLS)
    full = Vm("c1", "us-central1", VmPhase.BUSY, at(0), job_id="other")
    assert not plan(now=10, jobs=(j1, j2), vms=(first, spare, full), limits=per_region).delete


def test_a_region_back_after_a_shortage_is_asked_for_at_its_cheaper_pool_first():
    # Every pool stocked out; us-west1/standard's probe is the first to get capacity back.
    # The jobs have waited past their start bound: they rank by speed, where a stockout's risk counts.
    def memory(**spot) -> dict[str, RegionMemory]:
        out = {r: RegionMemory(blocked_until=at(900), strikes=2, last_boot_at=at(-4000), last_stockout_at=at(-300))
               for r in LIMITS.regions}
        out["us-west1"] = replace(out["us-west1"], **spot)
        out["us-west1/standard"] = replace(out["us-west1/standard"], booting=("probe",), known=("probe",))
        return out

    def unblocked(result) -> list[str]:
        return [d.region for d in result.decisions if d.action.value == "UNBLOCK"]

    back, jobs = [Vm("probe", "us-west1/standard", VmPhase.IDLE, at(290))], queued(3, queued_at=-400)
    result = plan(now=300, jobs=jobs, vms=back, memory=memory())
    assert [(d.region, d.reason) for d in result.decisions if d.action.value == "UNBLOCK"] == [
        ("us-west1/standard", "probe booted: the region delivers again"),
        ("us-west1", "us-west1/standard delivers again: its region's cheaper pool is asked again")]
    assert asked(result) == {"us-west1": 2}  # at $2.04 (spot), not $5.92: one job takes the probe
    assert result.memory["us-west1"].last_boot_at == at(300)  # as delivered: its stockout's risk halves too
    assert result.memory["us-west1"].strikes == 2  # a failed look there blocks it longer again
    # Not: spot blocked only after standard was (short on its own), its block over already (no look is
    # owed), short of its GPU quota (quotas are per model: the last read's, or a QUOTA error now), or its
    # MIG unread this pass.
    for spot in (dict(last_stockout_at=at(-100)), dict(blocked_until=at(250)), dict(quota_room=1)):
        result = plan(now=300, jobs=jobs, vms=back, memory=memory(**spot))
        assert unblocked(result) == ["us-west1/standard"], spot
    assert asked(plan(now=300, jobs=jobs, vms=back, memory=memory(last_stockout_at=at(-100)))) == {
        "us-west1/standard": 2}
    quota = MigError("us-west1", ErrorKind.QUOTA, at(295), detail="no VM fits the GPU quota")
    for view in (dict(unread=frozenset({"us-west1"})), dict(errors=(quota,))):
        result = ZenPlanner().plan(replace(snap(300, queued=jobs, vms=back, memory=memory(), limits=LIMITS,
                                                timing=Timing(hedge_risk=0.5)), **view))
        assert unblocked(result) == ["us-west1/standard"], view
    # Nor one whose VM Compute still lists refused for a quota Zen does not read (PREEMPTIBLE_CPUS; its error
    # read a pass ago): it was asked again, refused again, and its jobs waited another pass.
    refused = Vm("spot-1", "us-west1", VmPhase.BOOTING, at(-30), creation_error=ErrorKind.QUOTA)
    result = plan(now=300, jobs=jobs, vms=(*back, refused), memory=memory())
    assert unblocked(result) == ["us-west1/standard"] and "us-west1" not in asked(result)
    # Only a cheaper pool, and only for a priced pool that is not flex-start (whose blocks are its queue's).
    def priced(**pools) -> ClusterLimits:
        table = dict(POOLS, **pools)
        return ClusterLimits("8xa100", tuple(table), max_vms_per_region=4, max_vms=12, pools=table)

    for limits in (priced(**{"us-west1": Pool("us-west1", "spot", 6.5)}),
                   priced(**{"us-west1/standard": Pool("us-west1", "standard", None)}),
                   priced(**{"us-west1/standard": Pool("us-west1", "flex-start", 2.5)}),
                   priced(**{"us-west1": Pool("us-west1", "flex-start", 2.5)})):
        assert unblocked(plan(now=300, jobs=jobs, vms=back, memory=memory(), limits=limits)) == ["us-west1/standard"]


def test_an_idle_vm_is_kept_as_long_as_a_cold_start_where_the_next_job_would_go_costs():
    """Ski rental weighs keeping an idle VM against a cold start, in dollars: the next job's boot in the pool it would
    be asked in now, and where that pool costs more than the idle VM's, the difference over a run as the VM's pool
    learned it. Counted in the VM's own boot alone, a VM of the cheapest pool went as soon as any (a job then booted in
    a dearer pool, ranked first while the cheap one was recently out), and one of a dear pool stayed as long (a job
    then ran there when the cheapest pool would have booted it)."""
    from tests.scaling.test_planner import vm
    memory = trusted(LIMITS.regions)
    memory["us-west1"] = RegionMemory(last_boot_at=at(-100), last_stockout_at=at(150), run_s=1800.0)  # just out
    cheap = [vm("vm-c", "us-west1", VmPhase.IDLE, since=0)]  # $2.04/h; the next job would go to us-central1's $2.37/h
    assert plan(now=200, vms=cheap, memory=memory).delete == []  # kept: 120 s of boot alone kept it 109 s
    memory["us-west1"] = replace(memory["us-west1"], run_s=None)  # no run learned: the boot's price alone
    assert plan(now=200, vms=cheap, memory=memory).delete == [("us-west1", "vm-c")]

    dear = [vm("vm-c", "us-central1/standard", VmPhase.IDLE, since=0)]  # $5.92/h; the next job boots at $2.04/h
    result = plan(now=100, vms=dear)
    assert result.delete == [("us-central1/standard", "vm-c")]  # its boot in VM-seconds of $5.92/h: 41 s, kept 37 s
    assert "kept 37s, the price of a cold start" in result.decisions[-1].reason
