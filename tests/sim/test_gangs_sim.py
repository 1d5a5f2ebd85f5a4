"""Gangs (multi-node jobs) in the simulated world: start at the N-th node in one region, idle node-minutes
while waiting, one fate on preemption, the split and left-over counts, and single-node runs unchanged."""

from __future__ import annotations

from zen.scaling.model import Plan, VmPhase
from zen_dev.sim import gangs
from zen_dev.sim.jobs import SimJob, load_jobs
from zen_dev.sim.policies import AskEveryRegion, make_policy
from zen_dev.sim.report import json_report
from zen_dev.sim.runner import run_policies
from zen_dev.sim.world import Simulation

from tests.sim.helpers import scenario

FIXED_BOOT = "boot: {dist: fixed, s: 100}"  # usable 100 s after getting capacity


def gang(job_id: str = "g1", nodes: int = 2, duration_s: float = 3000, regions=("us-west1",), submit_s: float = 0.0):
    return SimJob(job_id, "4xa100", submit_s, duration_s, tuple(regions), nodes=nodes)


class Stepwise:
    """One VM in us-west1 at once, the second only from t = 300 s; records the demand it was shown."""

    name = "stepwise"

    def __init__(self):
        self.demand = []

    def plan(self, snapshot) -> Plan:
        self.demand.append([(g.regions, g.count, g.gang) for g in snapshot.demand_groups()])
        live = [vm for vm in snapshot.vms if vm.region == "us-west1" and vm.phase is not VmPhase.DELETING]
        want = 1 if (snapshot.now - snapshot.now.replace(hour=0, minute=0, second=0)).total_seconds() < 300 else 2
        want = min(want, sum(g.count for g in snapshot.demand_groups()) + sum(vm.phase is VmPhase.BUSY for vm in live))
        return Plan(add={"us-west1": want - len(live)} if want > len(live) else {})


def test_a_two_node_gang_starts_when_its_second_node_is_up_and_the_first_one_idles_meanwhile():
    sc = scenario("default: 4", extra=FIXED_BOOT)
    policy = Stepwise()
    sim = Simulation(sc, [gang()], policy, horizon_s=5000)
    result = sim.run()
    # Asked at 0 s (the submission's pass), usable at 100 s: a part claimed; the second asked at the
    # 300 s tick, usable at 400 s: the gang starts then, on both.
    assert result.gang_starts == [(0.0, 400.0)]
    assert result.gang_idle_seconds == 300.0  # one node, 100 s -> 400 s
    assert result.gang_summary()["gang_idle_node_minutes"] == 5.0
    assert ((("us-west1",), 2, 2)) in policy.demand[0]  # the planner is asked for the whole gang
    assert any(((("us-west1",), 1, 2)) in d for d in policy.demand)  # then its one node not claimed yet
    assert result.gangs_split == 0 and result.nodes_left_after_gang == 0
    assert sim.jobs[0].state == "DONE"


def test_a_gang_waits_for_its_last_node_within_the_assembly_bound_then_gives_its_part_back():
    # us-west1 has room for one VM only: the part claimed waits 600 s (gangs.assemble_s), is given
    # back and claimed again, never started.
    sc = scenario("""schedule:
    - {at_s: 0, zone: us-west1-a, capacity: 1}
  default: 4""", extra=FIXED_BOOT)
    result = Simulation(sc, [gang()], make_policy("zen"), horizon_s=3000).run()
    assert gangs.ASSEMBLE_S == 600
    assert result.gang_starts == [(0.0, None)]
    assert result.gang_assembly_timeouts >= 3
    assert result.gang_idle_seconds > 2000  # the one VM held a part nearly all the run
    assert result.gang_summary()["gangs_never_started"] == 1
    assert result.nodes_left_after_gang == 0


def test_a_preempted_node_ends_the_attempt_on_every_node_and_the_gang_runs_again():
    # us-west1-a falls to 1 VM at 1000 s (spot: one node preempted), back to 2 at 2000 s.
    sc = scenario("""schedule:
    - {at_s: 1000, zone: us-west1-a, capacity: 1}
    - {at_s: 2000, zone: us-west1-a, capacity: 2}
  default: 2""", extra=FIXED_BOOT)
    sim = Simulation(sc, [gang()], make_policy("zen"), horizon_s=9000)
    result = sim.run()
    job = sim.jobs[0]
    start = result.gang_starts[0][1]
    assert start is not None and start < 1000
    assert result.preemptions == 1 and job.preempted == 1 and job.attempt >= 1
    # Both nodes' runs since the start are rework (no checkpoints), not only the preempted one's.
    assert abs(result.lost_seconds - 2 * (1000 - start)) < 1e-6
    assert job.state == "DONE" and result.nodes_left_after_gang == 0
    assert all(vm.job is None and vm.part is None for vm in sim.clusters["4xa100"].vms.values())
    # As production, the gang was queued again at the preemption (its queued_at), and published then.
    assert job.queued_s == 1000.0 and job.published_s >= 1000.0


class KeepTwo:
    """Keeps two VMs asked for in us-west1, whatever the demand."""

    name = "keep-two"

    def plan(self, snapshot) -> Plan:
        live = [vm for vm in snapshot.vms if vm.region == "us-west1" and vm.phase is not VmPhase.DELETING]
        return Plan(add={"us-west1": 2 - len(live)} if len(live) < 2 else {})


def test_a_place_a_node_left_is_published_again_behind_the_starts_already_waiting():
    """A two-node gang's first part is claimed at 100 s; its VM is taken back at 300 s, before the gang is
    complete: that place's start is published again then, behind a job queued at 200 s, while the gang's
    unclaimed place keeps its turn (as production's start messages: one per node). When two VMs come after
    1,000 s, one claims the unclaimed place and the other takes the job; the gang starts when the job ends."""
    sc = scenario("""schedule:
    - {at_s: 0, zone: us-west1-a, capacity: 1}
    - {at_s: 300, zone: us-west1-a, capacity: 0}
    - {at_s: 1000, zone: us-west1-a, capacity: 2}
  default: 0""", extra=FIXED_BOOT)
    single = SimJob("s", "4xa100", 200.0, 100.0, ("us-west1",))
    sim = Simulation(sc, [gang(), single], KeepTwo(), horizon_s=9000)
    result = sim.run()
    jobs = {job.spec.job_id: job for job in sim.jobs}
    assert result.preemptions == 1
    up = jobs["s"].first_start_s
    assert 1100.0 <= up < 1200.0  # the VMs usable a boot after the capacity came back
    assert result.gang_starts == [(0.0, up + 100.0)]  # its second place claimed when s ended
    assert jobs["g1"].queued_s == 0.0  # never queued again: its assembly went on


MIX = """
  kind: synthetic
  count: 24
  arrivals: {kind: poisson, rate_per_hour: 12}
  duration: {dist: lognormal, median_s: 900, sigma: 0.5}
  nodes: {1: 2, 2: 2, 4: 1}"""


def test_split_and_left_over_nodes_are_counted_from_the_world_not_assumed(monkeypatch):
    sc = scenario("default: 4", jobs=MIX, per_region=6, max_vms=18, extra=FIXED_BOOT)
    jobs = load_jobs(sc)
    assert {j.nodes for j in jobs} == {1, 2, 4}
    for name in ("zen", "ask-every-region"):
        result = Simulation(sc, jobs, make_policy(name)).run()
        summary = result.gang_summary()
        assert summary["gangs"] == sum(j.nodes > 1 for j in jobs)
        assert summary["gangs_split"] == 0 and summary["nodes_left_after_gang"] == 0, name
        assert summary["gangs_never_started"] == 0, name
    # A world that forgot to free one node of an ended gang: counted.
    free, skipped = gangs.Gangs._free, []

    def forgetful(self, vm):
        if not skipped and vm.job is None and vm.part is None and vm.jobs_run:
            skipped.append(vm)
            vm.job = next(j for j in self.w.jobs if j.spec.nodes > 1 and j.state == "DONE")
            vm.job_start_s = self.w.now  # still running it
            return
        free(self, vm)
    monkeypatch.setattr(gangs.Gangs, "_free", forgetful)
    assert Simulation(sc, jobs, make_policy("zen")).run().nodes_left_after_gang >= 1
    monkeypatch.setattr(gangs.Gangs, "_free", free)
    # A world that took parts in any region and started a gang on whatever N it held: split gangs counted.
    claim = gangs.Gangs._claim

    def anywhere(self, vm, job):
        claim(self, vm, job)
        if job.state == "QUEUED" and len(job.parts) == job.spec.nodes:
            self._start(vm.mig.cluster, job, list(job.parts))
    monkeypatch.setattr(gangs.Gangs, "_claimable", lambda self, c, job, pool: len(job.parts) < job.spec.nodes)
    monkeypatch.setattr(gangs.Gangs, "_claim", anywhere)
    spread = scenario("default: 1", jobs=MIX, per_region=6, max_vms=18, extra=FIXED_BOOT)
    assert Simulation(spread, load_jobs(spread), make_policy("zen")).run().gangs_split > 0


def test_ask_every_region_asks_every_region_for_the_whole_gang_and_keeps_no_node_after_it():
    sc = scenario("default: 4", extra=FIXED_BOOT)
    asks = []

    class Watched(AskEveryRegion):
        def plan(self, snapshot):
            plan = super().plan(snapshot)
            asks.append(dict(plan.add))
            return plan
    regions = ("us-central1", "us-west1", "europe-west4")
    sim = Simulation(sc, [gang(nodes=3, duration_s=600, regions=regions)], Watched(), horizon_s=3000)
    result = sim.run()
    assert asks[0] == {r: 3 for r in regions}
    assert result.gang_starts[0][1] is not None and result.gangs_split == 0
    assert result.nodes_left_after_gang == 0
    assert not sim.clusters["4xa100"].vms  # single-use: every VM gone after the gang


def test_single_node_runs_are_unchanged_and_report_no_gang_keys():
    sc = scenario("""schedule:
    - {at_s: 0, zone: us-central1-a, capacity: 0}
    - {at_s: 1800, zone: us-central1-a, capacity: 4}
  default: 3""", extra="preemption: {rate_per_hour: 0.5}")
    results = run_policies(sc, load_jobs(sc), ["ask-every-region", "failover"])
    # The figures of the world before gangs existed (same scenario, seed and trace), as they are since a
    # rerun takes its turn from its requeue (``SimJobState.queued_s``, ``published_s``) and a preempted VM's
    # stop is billed (``preemption.stop_s``: 30 s each): no gang code may move them.
    assert results["ask-every-region"].summary() == {
        'p50_start_s': 494.1, 'p95_start_s': 988.7, 'p99_start_s': 1024.2, 'max_start_s': 1045.7, 'never_started': 0,
        'vm_minutes': 832.6, 'wasted_vm_minutes': 26.0, 'peak_vms': 10, 'api_calls': 1891, 'stopped_at_max_runtime': 0}
    assert results["failover"].summary() == {
        'p50_start_s': 335.0, 'p95_start_s': 720.0, 'p99_start_s': 812.0, 'max_start_s': 869.0, 'never_started': 0,
        'vm_minutes': 948.4, 'wasted_vm_minutes': 70.1, 'peak_vms': 10, 'api_calls': 1491, 'stopped_at_max_runtime': 0}
    assert results["failover"].extras()["lost_vm_minutes"] == 123.4
    assert "gangs" not in json_report(results)["policies"]["failover"]


def test_the_bench_gang_targets_can_fail():
    from zen_dev.sim.gangbench import gang_targets
    ask = {"gang_start_p95_s": 100.0, "gang_idle_node_minutes": 40.0, "gangs_never_started": 1, "gangs_split": 0,
           "nodes_left_after_gang": 0}
    good = dict(ask, gang_start_p95_s=110.0, gang_idle_node_minutes=10.0)
    assert all(gang_targets(good, ask).values())
    bad = dict(ask, gang_start_p95_s=111.0, gang_idle_node_minutes=10.1, gangs_never_started=2, gangs_split=1,
               nodes_left_after_gang=1)
    assert not any(gang_targets(bad, ask).values())


def test_the_held_out_gang_draw_keeps_the_trace_capacity_and_takes_the_gang_mix():
    import pytest
    from zen_dev.sim.gangbench import gang_heldout_scenario
    from zen_dev.sim.scenario import TraceUnavailable
    try:
        sc = gang_heldout_scenario()
    except TraceUnavailable:
        pytest.skip("the GCP A100 trace is absent")
    assert [c.gpu_count for c in sc.clusters] == [8]
    assert {j.nodes for j in load_jobs(sc)} == {1, 2, 4}


def test_zen_simulate_json_reports_the_gang_keys_beside_the_others(capsys):
    import json
    from zen_dev.sim.cli import main
    from zen_dev.sim.metrics import GANG_KEYS, JSON_KEYS
    assert main(["--scenario", "gangs-mix", "--policies", "zen,ask-every-region", "--max-jobs", "30", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["policies"]
    for name in ("zen", "ask-every-region"):
        assert list(out[name]) == list(JSON_KEYS + GANG_KEYS)
        assert out[name]["gangs"] > 0 and out[name]["gangs_split"] == 0 and out[name]["nodes_left_after_gang"] == 0


def test_job_traces_give_nodes_philly_maps_gpus_beyond_one_vm_to_nodes_and_csv_reads_them(tmp_path):
    from zen_dev.sim.jobs import JobTraceError, csv_jobs, philly_jobs
    sc = scenario("default: 4")  # one cluster of 4-GPU VMs
    philly = tmp_path / "philly.csv"
    philly.write_text("jobid,submitted_time,num_gpus,runtime_min\n"
                      "a,2017-10-01 00:00:00,4,10\nb,2017-10-01 00:01:00,8,10\nc,2017-10-01 00:02:00,13,10\n")
    assert [j.nodes for j in philly_jobs(philly, sc.clusters, gangs=True)] == [1, 2, 4]
    assert [j.nodes for j in philly_jobs(philly, sc.clusters)] == [1, 1, 1]  # without gangs: one VM, as before
    zen = tmp_path / "jobs.csv"
    zen.write_text("job_id,submit_s,duration_s,cluster,regions,priority,nodes\n"
                   "x,0,60,4xa100,,0,3\ny,1,60,4xa100,,0,\n")
    assert [j.nodes for j in csv_jobs(zen, sc.clusters)] == [3, 1]
    zen.write_text("job_id,submit_s,duration_s,cluster,regions,priority,nodes\nx,0,60,4xa100,,0,0\n")
    import pytest
    with pytest.raises(JobTraceError, match="nodes"):
        csv_jobs(zen, sc.clusters)


def test_a_gang_whose_region_stocks_out_is_given_back_at_once_and_assembles_in_another_region():
    # A warm VM in us-west1 (it ran a one-node job) claims the gang's first part; us-west1 has room for
    # that VM only. Once the planner finds us-west1 stocked out, the tick gives the part back (not at the
    # 600 s bound) and the next attempt is offered outside us-west1 first: it assembles in us-central1.
    sc = scenario("""schedule:
    - {at_s: 0, zone: us-west1-a, capacity: 1}
  default: 4""", extra=FIXED_BOOT, regions="[us-central1, us-west1]")
    warm = SimJob("warm", "4xa100", 0.0, 200.0, ("us-west1",))
    both = gang(regions=("us-west1", "us-central1"), submit_s=400.0, duration_s=1000)
    sim = Simulation(sc, [warm, both], make_policy("zen"), horizon_s=4000)
    result = sim.run()
    [(submitted, started)] = result.gang_starts
    assert started is not None and started - submitted < gangs.ASSEMBLE_S
    assert (result.gang_stockout_releases, result.gang_assembly_timeouts) == (1, 0)
    assert [region for at, region in result.start_regions if at == started] == ["us-central1"]
    assert result.gangs_split == 0 and result.nodes_left_after_gang == 0


def test_a_gang_claimed_where_its_limits_leave_no_room_for_the_rest_is_given_back_at_the_next_tick():
    # us-west1 may hold 2 VMs, both running one-node jobs; the short one ends as the gang waits and its VM
    # claims the gang's first part there: the other is busy for long and the pool is at its limit, so the
    # rest cannot come. The planner's memory says so (gang_room 0), and the tick gives the part back (not
    # at the 600 s bound); the next attempt assembles in us-central1.
    sc = scenario("default: 4", extra=FIXED_BOOT, regions="[us-central1, us-west1]", per_region=2)
    busy = [SimJob("long", "4xa100", 0.0, 5000.0, ("us-west1",)), SimJob("short", "4xa100", 0.0, 200.0, ("us-west1",))]
    both = gang(regions=("us-west1", "us-central1"), submit_s=250.0, duration_s=1000)
    result = Simulation(sc, [*busy, both], make_policy("zen"), horizon_s=4000).run()
    [(submitted, started)] = result.gang_starts
    assert started is not None and started - submitted < gangs.ASSEMBLE_S / 2
    assert (result.gang_room_releases, result.gang_stockout_releases, result.gang_assembly_timeouts) == (1, 0, 0)
    assert [region for at, region in result.start_regions if at == started] == ["us-central1"]
    assert result.gangs_split == 0 and result.nodes_left_after_gang == 0


def test_a_gang_with_no_other_region_waits_where_it_is_though_its_limits_leave_no_room():
    # The same, but the gang may run only in us-west1: released, its part's VM would claim it again at
    # once (and the next, round after round); it waits for its deadline there instead.
    sc = scenario("default: 4", extra=FIXED_BOOT, regions="[us-central1, us-west1]", per_region=2)
    busy = [SimJob("long", "4xa100", 0.0, 5000.0, ("us-west1",)), SimJob("short", "4xa100", 0.0, 200.0, ("us-west1",))]
    alone = gang(regions=("us-west1",), submit_s=250.0)
    sim = Simulation(sc, [*busy, alone], make_policy("zen"), horizon_s=8000)
    result = sim.run()
    assert result.gang_room_releases == 0 and result.gang_assembly_timeouts > 0
    # Each new attempt's start is published again, but the gang stays QUEUED: production keeps its
    # queued_at, from which the planner counts its wait.
    [state] = [job for job in sim.jobs if job.spec.nodes > 1]
    assert state.attempt > 0 and state.queued_s == 250.0 and state.published_s > 250.0


def test_a_gang_between_two_stocked_out_regions_is_not_moved_back_and_forth():
    # A warm VM in each of two regions that have room for that VM only: the gang can complete in neither.
    # The planner's blocks lapse between its probes, so releasing it whenever the other region is not
    # blocked at that moment moved it back and forth (25 times over the run); a region where a stockout
    # was found within assemble_s is not one to move to, so it moves about once per assemble_s at most.
    sc = scenario("""schedule:
    - {at_s: 0, zone: us-west1-a, capacity: 1}
    - {at_s: 0, zone: us-central1-a, capacity: 1}
  default: 4""", extra=FIXED_BOOT, regions="[us-central1, us-west1]")
    warm = [SimJob(f"warm-{r}", "4xa100", 0.0, 200.0, (r,)) for r in ("us-west1", "us-central1")]
    both = gang(regions=("us-west1", "us-central1"), submit_s=400.0, duration_s=1000)
    result = Simulation(sc, [*warm, both], make_policy("zen"), horizon_s=5000).run()
    assert result.gang_starts[-1] == (400.0, None) and result.nodes_left_after_gang == 0
    moves = result.gang_stockout_releases + result.gang_assembly_timeouts
    assert 0 < moves <= 2 * (5000 - 400) / gangs.ASSEMBLE_S, result


def test_gang_waits_count_a_gang_never_started_to_its_own_runs_end_and_ratios_of_nothing_are_defined():
    import math
    from zen_dev.sim.metrics import RunResult, ratio
    short, long = RunResult("zen", horizon_s=100.0), RunResult("zen", horizon_s=500.0)
    short.gang_starts, long.gang_starts = [(10.0, None), (20.0, 30.0)], [(400.0, None)]
    assert short.gang_waits() == [90.0, 10.0] and long.gang_waits() == [100.0]  # not 100 - 400
    assert ratio(0.0, 0.0) == 1.0 and ratio(1.0, 0.0) == math.inf and ratio(None, 1.0) is None
    assert ratio(3.0, 2.0) == 1.5


def test_the_gang_draws_section_counts_draws_within_and_the_noise_floor(monkeypatch):
    """With ask-every-region's second run on the same seeds (AGAIN = 0) the floor holds on every draw at
    1.00x; zen's count is the draws whose own p95 ratio is within 1.10x, computed here apart."""
    import pytest
    from zen_dev.sim import gangbench
    from zen_dev.sim.scenario import TraceUnavailable
    try:
        gangbench.gang_heldout_scenario(201)
    except TraceUnavailable:
        pytest.skip("the GCP A100 trace is absent")
    monkeypatch.setattr(gangbench, "AGAIN", 0)
    draws = (201, 212)
    lines = gangbench.draws_report(draws=draws, seeds=1)
    within = 0
    for draw in draws:
        runs = gangbench.run_gangs(gangbench.gang_heldout_scenario(draw), 1)
        zen, ask = (runs[p].gang_summary()["gang_start_p95_s"] for p in ("zen", "ask-every-region"))
        within += zen <= 1.10 * ask
        assert f"{draw}: {zen / ask:.2f}/" in lines[1]
    assert f"p95 <= 1.10x on {within} of 2 draws; ask-every-region against itself with other seeds: 2 of 2 " \
           "(its worst 1.00x)" in lines[2]


# A gang its cluster's limits can never hold -----------------------------------------------------------------
ABOVE_LIMITS = """
seed: 1
clusters:
  - {name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-central1, us-west1],
     max_vms_per_region: 2, max_vms: 4}
zones: {us-central1: [us-central1-a], us-west1: [us-west1-a]}
capacity: {default: 4}
boot: {dist: fixed, s: 100}
"""


def _refused_gang(tmp_path, capsys, nodes: int):
    import json

    from zen_dev.sim.cli import main
    (tmp_path / "s.yaml").write_text(ABOVE_LIMITS)
    (tmp_path / "jobs.csv").write_text(f"job_id,submit_s,duration_s,cluster,regions,priority,nodes\ng,0,600,c,,,{nodes}\n")
    rc = main(["--scenario", str(tmp_path / "s.yaml"), "--jobs", str(tmp_path / "jobs.csv"),
               "--policies", "single-region,ask-every-region", "--horizon-s", "7200", "--json"])
    out, err = capsys.readouterr()
    shown = json.loads(out)["policies"] if rc == 0 and out.strip() else None
    return rc, shown, err


def test_a_gang_above_max_vms_per_region_is_refused_naming_nodes(tmp_path, capsys):
    """Production refuses a gang whose nodes exceed the cluster's max_vms_per_region (a gang runs in one region;
    ``ClusterConfig.nodes_problem``). The simulator ran it: every policy booted VMs for it, they waited out the
    assembly bound again and again, and the run reported billed waste and a job never started for a job
    production never takes. It is refused now, exit 2, naming nodes and the limit."""
    rc, shown, err = _refused_gang(tmp_path, capsys, 3)
    assert rc == 2, f"accepted (exit {rc}): {shown}"
    assert "nodes: 3" in err and "max_vms_per_region" in err, err


def test_a_gang_above_max_vms_is_refused_naming_nodes(tmp_path, capsys):
    """A gang above the cluster's max_vms was run as well; it is refused now, naming nodes and max_vms."""
    rc, shown, err = _refused_gang(tmp_path, capsys, 5)
    assert rc == 2, f"accepted (exit {rc}): {shown}"
    assert "nodes: 5" in err and "max_vms (4)" in err, err
