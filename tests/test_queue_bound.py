"""The queue bound of ``make bench-bound`` (benchmarks/queue_bound.py): tiny cases solved by hand, and the
simulator's own runs never starting a job earlier than it says any policy can."""

import pytest

from benchmarks.queue_bound import earliest_waits, not_bounded, places
from zen_dev.sim.jobs import SimJob, load_jobs
from zen_dev.sim.runner import run_policies
from zen_dev.sim.scenario import load_scenario, parse_scenario

REGIONS = ("us-central1", "us-west1")


def scenario(steps: str = "", default: int = 0, max_vms: int = 100, per_region: int = 100, extra: str = "",
             models: str = "[spot]") -> object:
    """Two regions of one zone each; ``steps`` "AT:ZONE:CAPACITY[:MODEL] ..." (zone a or b: the first region's
    or the second's; a model: that model's own capacity)."""
    def row(at: str, zone: str, cap: str, model: str = "") -> str:
        own = f" machine_type: m1, model: {model}," if model else ""
        return f"    - {{at_s: {at}, zone: {REGIONS[zone == 'b']}-a,{own} capacity: {cap}}}"
    rows = "\n".join(row(*s.split(":")) for s in steps.split())
    text = f"""seed: 1
clusters:
  - {{name: c, gpu_count: 1, machine_type: m1, regions: [{', '.join(REGIONS)}], max_vms_per_region: {per_region},
     max_vms: {max_vms}, provisioning: {models}}}
zones:
  {REGIONS[0]}: [{REGIONS[0]}-a]
  {REGIONS[1]}: [{REGIONS[1]}-a]
capacity:
  default: {default}
  schedule:
{rows or "    []"}
{extra}"""
    return parse_scenario(text.replace("schedule:\n    []", "schedule: []"))


def jobs(*spec: tuple[float, float], regions: tuple[str, ...] = REGIONS) -> list[SimJob]:
    return [SimJob(f"j{i}", "c", at, duration, regions) for i, (at, duration) in enumerate(spec)]


def assert_bounded(scn, trace: list[SimJob], policies: list[str], horizon_s: float, **kwargs) -> list[float]:
    """Every policy's sorted waits at least the bound's, order statistic by order statistic."""
    assert not_bounded(scn, trace, horizon_s) is None
    least = earliest_waits(scn, trace, horizon_s)
    for policy, run in run_policies(scn, trace, policies, horizon_s=horizon_s, **kwargs).items():
        waits = sorted(run.waits())
        assert len(waits) == len(least), policy
        assert all(w >= b - 1e-6 for w, b in zip(waits, least)), (policy, waits, least)
    return least


def test_places_come_with_each_zones_highest_capacity_so_far_within_the_limits():
    # a: 1 place at 0, 3 at 100, down to 0 at 200 (the highest so far is kept; where capacity falls the bound
    # does not apply: not_bounded); b: 2 at 300.
    grown = scenario("0:a:1 100:a:3 200:a:0 300:b:2")
    assert places(grown, grown.clusters[0], 1000.0, 10) == [0.0, 100.0, 100.0, 300.0, 300.0]
    assert places(grown, grown.clusters[0], 1000.0, 2) == [0.0, 100.0]  # no more than the jobs need
    assert places(grown, grown.clusters[0], 250.0, 10) == [0.0, 100.0, 100.0]  # the horizon ends it
    capped = scenario("0:a:1 100:a:3 200:a:0 300:b:2", max_vms=4, per_region=2)
    assert places(capped, capped.clusters[0], 1000.0, 10) == [0.0, 100.0, 300.0, 300.0]
    # max_vms_per_region holds per pool: with spot and standard, a region may hold twice as many.
    two_models = scenario("0:a:3", per_region=1, models="[spot, standard]")
    assert places(two_models, two_models.clusters[0], 1000.0, 10) == [0.0, 0.0]
    # A model's own capacity counts even where the cluster does not list it (the original runs standard).
    own = scenario("0:a:0:spot 0:a:2:standard", models="[spot]")
    assert places(own, own.clusters[0], 1000.0, 10) == [0.0, 0.0]


def test_each_job_in_arrival_order_takes_the_place_free_first():
    two = scenario(default=1)  # one place a region: two in all
    waits = earliest_waits(two, jobs((0, 10), (0, 10), (0, 10), (5, 10)), horizon_s=1000.0)
    assert waits == pytest.approx([0, 0, 5, 10])  # the third at 10 (wait 10), the fourth at 10 (wait 5)
    # A later job never starts before an earlier one, even where a place is free for it.
    waits = earliest_waits(scenario(default=1, max_vms=1), jobs((0, 100), (50, 1)), horizon_s=1000.0)
    assert waits == pytest.approx([0, 50])


def test_a_job_with_no_place_before_the_horizon_waits_until_it_and_one_after_it_is_not_run():
    late = scenario("500:a:1")
    assert earliest_waits(late, jobs((0, 10), (100, 10)), horizon_s=300.0) == pytest.approx([200, 300])
    assert earliest_waits(scenario(), jobs((0, 10)), horizon_s=300.0) == pytest.approx([300])
    assert earliest_waits(scenario(default=1), jobs((0, 10), (500, 10)), horizon_s=300.0) == pytest.approx([0])


def test_the_bound_holds_only_where_no_job_can_be_passed_and_no_run_cut_short():
    one = scenario(default=1)
    assert not_bounded(one, jobs((0, 10), (5, 10)), 1000.0) is None
    assert not_bounded(one, jobs((0, 10), (5, 10), regions=REGIONS[:1]), 1000.0) == "jobs kept to some regions"
    kept = jobs((0, 10), (5, 10))
    kept[1] = SimJob("j1", "c", 5, 10, REGIONS, priority=1)
    assert not_bounded(one, kept, 1000.0) == "priorities"
    kept[1] = SimJob("j1", "c", 5, 10, REGIONS, nodes=2)
    assert not_bounded(one, kept, 1000.0) == "gangs"
    kept[1] = SimJob("j1", "c", 5, 10, REGIONS, provisioning="standard")
    assert not_bounded(scenario(default=1, models="[spot, standard]"), kept, 1000.0) == "jobs kept to some models"
    # A run cut short hands its place on early: a capacity that falls, or random preemptions.
    falls = scenario("0:a:1 500:a:0 600:a:1")
    assert not_bounded(falls, jobs((0, 10)), 1000.0) == "capacity falls: a preemption hands a place on early"
    assert not_bounded(falls, jobs((0, 10)), 400.0) is None  # it falls after the horizon
    random = scenario(default=1, extra="preemption: {rate_per_hour: 6}\n")
    assert not_bounded(random, jobs((0, 10)), 1000.0) == "random preemptions"


def test_policies_with_two_pools_a_region_or_a_model_the_cluster_does_not_list_stay_within_it():
    both = scenario("0:a:10", per_region=1, models="[spot, standard]")  # room in the first region only
    least = assert_bounded(both, jobs((0, 3000), (0, 3000)), ["zen", "cheapest-first", "ask-every-region"], 8000.0)
    assert least == pytest.approx([0, 0])  # a spot and a standard VM there: max_vms_per_region holds per pool
    standard_only = scenario("0:a:0:spot 0:a:5:standard", models="[spot]")
    assert_bounded(standard_only, jobs((0, 600), (10, 600)), ["ask-every-region-standard", "zen"], 5000.0)


def test_no_policy_in_the_simulator_starts_a_job_earlier_than_the_bound():
    from zen_dev.sim.dollars import priced
    burst = priced(load_scenario("burst-200"), 1)  # 200 jobs at once, every place busy for hours; spot+standard
    loaded = load_jobs(burst)
    policies = ["zen", "cheapest-first", "ask-every-region", "ask-every-region-standard", "failover"]
    horizon = burst.spec.horizon_s
    least = assert_bounded(burst, loaded, policies, horizon, seed=burst.spec.seed)
    assert least[len(least) // 2] > 1000  # the places bind: the bound is not 0 s
