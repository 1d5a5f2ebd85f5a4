"""Behaviour of the simulated world and the baseline policies (deterministic given a seed)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from zen.scaling.model import ErrorKind, VmPhase
from zen_dev.sim.jobs import SimJob, load_jobs
from zen_dev.sim.policies import BASELINES, Unlimited, SingleRegion, available_policies, make_policy
from zen_dev.sim.runner import run_policies
from zen_dev.sim.scenario import load_scenario
from zen_dev.sim.world import Simulation

from tests.sim.helpers import Greedy, Recording, scenario

REGION_OUT = """schedule:
    - {at_s: 0, zone: us-central1-a, capacity: 0}
  default: 4"""


def run(sc, policy, **kw):
    return Simulation(sc, load_jobs(sc), policy, **kw).run()


def test_unlimited_reference_ignores_capacity_and_limits():
    sc = scenario("default: 0", per_region=1, max_vms=2, jobs="""
  kind: synthetic
  count: 6
  arrivals: {kind: burst, at_s: 10}
  duration: {dist: fixed, s: 600}""", extra="boot: {dist: fixed, s: 60}")
    result = run(sc, Unlimited())
    assert sorted(start for _, start in result.starts) == [70.0] * 6  # no stockout, no limit: all at once
    assert result.limit_violations == 0


def test_ask_every_region_boots_more_vms_than_jobs_when_several_regions_have_capacity():
    sc = scenario("default: 4")
    result = run(sc, make_policy("ask-every-region"))
    started = sum(1 for _, start in result.starts if start is not None)
    assert result.summary()["never_started"] == 0
    assert result.vms_created > started * 1.5  # several regions answer each ask
    assert run(sc, Unlimited()).vms_created < started  # warm reuse needs fewer boots


def test_single_region_never_starts_a_job_when_its_region_is_out_for_the_whole_run():
    sc = scenario(REGION_OUT)
    summary = run(sc, SingleRegion()).summary()
    assert summary["never_started"] == 40
    assert summary["vm_minutes"] == 0  # instances waiting for capacity cost nothing
    other = run(sc, make_policy("failover")).summary()
    assert other["never_started"] == 0


def test_stockouts_show_as_booting_instances_with_errors_every_retry():
    sc = scenario(REGION_OUT)
    policy = Recording(SingleRegion())
    run(sc, policy)
    delay = timedelta(seconds=sc.spec.list_errors_delay_s)
    stuck = [vm for s in policy.snapshots for vm in s.vms if vm.region == "us-central1"]
    assert stuck and all(vm.phase is VmPhase.BOOTING for vm in stuck)
    # listErrors (and the instance's last attempt) show the stockout only after the delay
    assert all(vm.creation_error is ErrorKind.STOCKOUT for s in policy.snapshots for vm in s.vms
               if vm.region == "us-central1" and s.now - vm.since >= delay)
    errors = [e for s in policy.snapshots for e in s.errors]
    assert errors and {e.region for e in errors} == {"us-central1"}
    per_vm = Counter()
    for e in errors:
        per_vm[e.instance] += e.count
    # each waiting instance fails every 30 s: about two failures per 60 s tick, never repeated, and
    # a snapshot folds each instance's new failures into one error (``count``, ``at`` the last)
    assert max(per_vm.values()) > 100
    assert max(e.count for e in errors) >= 2
    assert all(len({e.instance for e in s.errors}) == len(s.errors) for s in policy.snapshots)
    assert len({(e.instance, e.at) for e in errors}) == len(errors)


def test_capacity_returning_boots_the_waiting_instance():
    sc = scenario("""schedule:
    - {at_s: 0, zone: us-central1-a, capacity: 0}
    - {at_s: 1800, zone: us-central1-a, capacity: 4}
  default: 0""")
    result = run(sc, SingleRegion())
    starts = [start for _, start in result.starts if start is not None]
    assert len(starts) >= 8  # the region's 4 VMs, reused
    assert min(starts) >= 1800
    assert min(starts) < 1800 + 30 + 600  # next retry, then a boot


def test_busy_vms_are_never_deleted_and_limits_never_exceeded():
    """As the production manager applies plans: adds clamped to the per-MIG limit and to the
    cluster's max_vms, deletions only of drained VMs."""
    sc = scenario("default: unlimited", per_region=3, max_vms=5)
    policy = Greedy()
    result = run(sc, policy)
    assert result.busy_delete_attempts > 0
    assert result.limit_violations > 3 * 97  # the first pass alone asks 97 beyond each MIG's limit
    for snapshot in policy.snapshots:
        alive = Counter(vm.region for vm in snapshot.vms if vm.phase is not VmPhase.DELETING)
        assert all(n <= 3 for n in alive.values())
        assert all(size <= 3 for size in snapshot.target_sizes.values())
        assert sum(snapshot.target_sizes.values()) <= 5
    assert any(start is not None for _, start in result.starts)  # busy VMs survived to run jobs


@pytest.mark.parametrize("name", ["region-out", "burst-200"])
def test_policies_respect_limits_and_never_delete_busy_vms(name):
    sc = load_scenario(name)
    for policy_name, result in run_policies(sc, load_jobs(sc), available_policies()).items():
        assert result.limit_violations == 0, policy_name
        assert result.busy_delete_attempts == 0, policy_name


def test_same_seed_same_results_and_another_seed_differs():
    sc = scenario("default: 2")
    first = run(sc, make_policy("failover")).summary()
    assert run(sc, make_policy("failover")).summary() == first
    assert run(sc, make_policy("failover"), seed=99).summary() != first


def test_warm_reuse_starts_back_to_back_jobs_at_once():
    sc = scenario("default: 4", jobs="""
  kind: synthetic
  count: 30
  arrivals: {kind: poisson, rate_per_hour: 60}
  duration: {dist: fixed, s: 60}""")
    unlimited = run(sc, Unlimited()).summary()
    ask = run(sc, make_policy("ask-every-region")).summary()
    assert unlimited["p50_start_s"] == 0  # an idle VM was waiting
    assert ask["p50_start_s"] > 0  # single-use VMs: every job waits for a boot
    assert unlimited["wasted_vm_minutes"] > 0  # idle time before the idle timeout is paid


def test_preemptions_requeue_jobs_and_vms_are_recreated():
    sc = scenario("default: 4", extra="preemption: {rate_per_hour: 2.0}")
    result = run(sc, Unlimited())
    assert result.preemptions > 0
    assert result.summary()["never_started"] == 0



DATA_JOBS = """
  kind: synthetic
  count: 30
  arrivals: {kind: poisson, rate_per_hour: 30}
  duration: {dist: fixed, s: 600}"""


def test_a_data_share_lists_each_such_jobs_region_first_and_leaves_the_rest_of_the_trace_alone():
    plain = load_jobs(scenario(jobs=DATA_JOBS))
    jobs = load_jobs(scenario(jobs=DATA_JOBS + "\n  data: {fraction: 0.5, size_gb: 10}"))
    with_data = [j for j in jobs if j.input_gb]
    assert 5 < len(with_data) < 25
    assert all(j.input_gb == 10 and j.regions[0] == j.data_region and set(j.regions) == set(REGIONS)
               for j in with_data)
    assert [(j.job_id, j.submit_s, j.duration_s) for j in jobs] == [(j.job_id, j.submit_s, j.duration_s) for j in plain]


REGIONS = ("us-central1", "us-west1", "europe-west4")


def test_input_read_from_another_region_than_its_data_is_counted(tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text("job_id,submit_s,duration_s,cluster,regions,priority,input_gb,data_region\n"
                     "far,10,600,4xa100,,,40,europe-west4\n"
                     "near,20,600,4xa100,,,25,us-central1\n"
                     "none,30,600,4xa100,,,,\n")
    sc = scenario("""schedule:
    - {at_s: 0, zone: europe-west4-a, capacity: 0}
    - {at_s: 0, zone: us-west1-a, capacity: 0}
  default: 4""")
    jobs = load_jobs(sc, str(trace))
    assert [j.regions[0] for j in jobs] == ["europe-west4", "us-central1", "us-central1"]
    result = run_policies(sc, jobs, ["ask-every-region"])["ask-every-region"]
    assert all(start is not None for _, start in result.starts)  # all ran in us-central1, the only one with GPUs
    assert (result.input_gb, result.input_gb_cross_region) == (65, 40)


def test_a_vm_is_billed_from_running_not_from_getting_capacity():
    """GCE bills from RUNNING; the simulator billed from capacity, the whole boot, which made losers
    cancelled mid-boot (ask-every-region's) cost more than they do. A fixed 100 s boot: half of it
    unbilled saves 50 s of the one VM's bill, and an ask-every-region loser deleted before RUNNING
    costs nothing."""
    def billed(fraction, policy, boot="{dist: fixed, s: 100}"):
        sc = scenario("default: 4", per_region=1, max_vms=3, jobs="""
  kind: synthetic
  count: 1
  arrivals: {kind: burst, at_s: 1}
  duration: {dist: fixed, s: 600}""", extra=f"boot: {boot}\nunbilled_boot_fraction: {fraction}")
        return run(sc, policy).vm_seconds

    assert billed(0.0, SingleRegion()) - billed(0.5, SingleRegion()) == pytest.approx(50, abs=0.01)
    # Three regions asked at once, boots of 20-40 s: the losers, cancelled the moment the winner is
    # usable, are mostly still before RUNNING when 90% of each boot is unbilled.
    spread = "{dist: uniform, low_s: 20, high_s: 40}"
    assert billed(0.9, make_policy("ask-every-region"), spread) < billed(0.0, make_policy("ask-every-region"), spread)


def _tiny(capacity: str, regions=("r1",), extra: str = "", boot: str = "{dist: fixed, s: 100}"):
    from zen_dev.sim.scenario import parse_scenario

    zones = "\n".join(f"  {r}: [{r}-a]" for r in regions)
    return parse_scenario(f"""
seed: 1
clusters:
  - {{name: c, gpu_count: 1, machine_type: m1, regions: [{', '.join(regions)}], max_vms_per_region: 8, max_vms: 16}}
zones:
{zones}
capacity:
  {capacity}
boot: {boot}
{extra}
""", name="tiny")


def test_a_vm_recreated_after_a_capacity_drop_is_not_taken_for_stuck_before_its_error_shows():
    """r1's only zone loses its capacity at 2030 s under a running job: its VM is preempted and the MIG
    recreates it, waiting for capacity. Production dates the new boot from the agent's last word (its
    STOPPING), so the region is blocked only once the stockout shows in listErrors (20 s later), not
    at the next pass for a boot 'not booted after 1980 s' (the simulator dated it from the first listing)."""
    from zen_dev.sim.jobs import SimJob

    sc = _tiny("""default: 2
  schedule:
    - {at_s: 0, zone: r1-a, capacity: 1}
    - {at_s: 2030, zone: r1-a, capacity: 0}""", regions=("r1", "r2"), extra="horizon_s: 3000\ntick_s: 60")
    policy = Recording(make_policy("zen"))
    plans = []
    inner = policy.plan

    def plan(snapshot):
        out = inner(snapshot)
        plans.append((snapshot.now.timestamp() % 86400, out.decisions))
        return out

    policy.plan = plan
    result = Simulation(sc, [SimJob("j1", "c", 10, 6000, ("r1", "r2"))], policy).run()
    assert result.capacity_preemptions == 1
    started = result.starts[0][1]  # its run up to the preemption is lost, not waste: it runs again from the start
    assert result.extras()["lost_vm_minutes"] == round((2030 - started) / 60, 1)
    blocks = [(t, d.reason) for t, decisions in plans for d in decisions
              if d.action.value == "BLOCK" and d.region == "r1" and t >= 2030]
    assert blocks and blocks[0][0] >= 2030 + sc.spec.list_errors_delay_s, blocks
    assert "stockout" in blocks[0][1]


def test_a_capacity_drop_takes_no_running_vm_for_capacity_a_deleted_vm_gives_back():
    """Capacity 2 -> 1 at 1215 s while one of the zone's two VMs is being deleted (until 1240 s): the
    deletion gives the capacity back, so the busy VM keeps its job (it was preempted, its job rerun)."""
    from zen_dev.sim.jobs import SimJob

    sc = _tiny("""default: 2
  schedule:
    - {at_s: 0, zone: r1-a, capacity: 2}
    - {at_s: 1215, zone: r1-a, capacity: 1}""", extra="horizon_s: 3000\ntick_s: 60\ndelete_s: 30")
    jobs = [SimJob("j1", "c", 10, 1100, ("r1",)), SimJob("j2", "c", 10, 2000, ("r1",))]
    result = Simulation(sc, jobs, make_policy("ask-every-region")).run()
    assert result.capacity_preemptions == 0
    assert result.preemptions == 0


def test_deletions_the_world_makes_for_ask_every_region_count_as_compute_calls():
    """A single-use VM deleted when its job ends is a deleteInstances call and its operation's read,
    as the manager's port counts zen's deletions (they were not counted: ask-every-region looked
    cheaper in Compute calls than it is)."""
    from zen_dev.sim.jobs import SimJob

    calls = {}
    for horizon in (500, 1500):  # the job (submitted at 10, booted at ~110) ends at ~1110
        sc = _tiny("default: 2", extra=f"horizon_s: {horizon}\ntick_s: 100000")
        result = Simulation(sc, [SimJob("j1", "c", 10, 1000, ("r1",))], make_policy("ask-every-region")).run()
        calls[horizon] = result.api_calls
    assert calls[1500] - calls[500] == 2


@pytest.mark.parametrize("extra, first_word_pass", [("first_word_s: 20", 60.0), ("first_word_s: 0", 40.0),
                                                    ("first_word_s: 500", 130.0), ("pass_on_vm_running: false", None)])
def test_zen_looks_again_at_a_racing_vms_first_word_not_at_running(extra, first_word_pass):
    """One job at 10 s; zen asks r1 and hedges in r2; both are RUNNING at 40 s (30 s provisioning) and
    their agents up at 130 s. The first word (``first_word_s`` after RUNNING, never after the agent)
    runs a pass; the tick (every 600 s) runs none in between."""
    from zen_dev.sim.jobs import SimJob

    sc = _tiny("default: 2", regions=("r1", "r2"), boot="{dist: fixed, s: 30}",
               extra=f"guest_boot: {{dist: fixed, s: 90}}\ntick_s: 600\nhorizon_s: 400\n{extra}")
    policy = Recording(make_policy("zen"))
    times: list[float] = []
    inner = policy.plan

    def plan(snapshot):
        times.append(round(snapshot.now.timestamp() % 86400, 3))
        return inner(snapshot)

    policy.plan = plan
    Simulation(sc, [SimJob("j1", "c", 10, 200, ("r1", "r2"))], policy).run()
    between = [t for t in times if 10 < t < 130]
    assert between == ([] if first_word_pass is None or first_word_pass >= 130 else [first_word_pass]), times


def test_a_rerun_takes_its_turn_from_its_requeue_and_time_to_start_counts_from_the_submission():
    """As production: a job a preemption cut short is queued again with ``queued_at`` then and its start
    published again, so a job queued before it starts first and the planner counts its wait from the
    requeue; time-to-start still counts from the submission to the first start."""
    drop = """schedule:
    - {at_s: 1000, zone: us-central1-a, capacity: 0}
    - {at_s: 2000, zone: us-central1-a, capacity: 1}
  default: 1"""
    sc = scenario(drop, regions="[us-central1]", per_region=1, max_vms=1)
    jobs = [SimJob("long", "4xa100", 0.0, 5000.0, ("us-central1",)), SimJob("b", "4xa100", 500.0, 300.0, ("us-central1",))]
    policy = Recording(make_policy("zen"))
    sim = Simulation(sc, jobs, policy, horizon_s=9000)
    result = sim.run()
    jobs = {job.spec.job_id: job for job in sim.jobs}
    assert result.preemptions == 1 and jobs["long"].preempted == 1
    first_long, b_start = jobs["long"].first_start_s, jobs["b"].first_start_s
    assert first_long < 1000 and 2000 < b_start < 2600  # b, queued at 500, before the rerun queued at 1000
    assert jobs["long"].queued_s == 1000.0
    assert result.starts == [(0.0, first_long), (500.0, b_start)]
    t0 = sim.dt(0)
    during = [s for s in policy.snapshots if 1000 < (s.now - t0).total_seconds() < 2000]
    assert during and all(min((g.oldest - t0).total_seconds() for g in s.demand_groups()) == 500.0 for s in during)
    after_b = [s for s in policy.snapshots if (s.now - t0).total_seconds() > b_start + 1 and s.demand_groups()]
    assert after_b and all((g.oldest - t0).total_seconds() == 1000.0 for s in after_b for g in s.demand_groups())
