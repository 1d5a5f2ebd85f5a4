"""The queue bound of ``make bench-bound`` (benchmarks/queue_bound.py): tiny cases solved by hand, and the
simulator's own runs never starting a job earlier than it says any policy can."""

import pytest

from benchmarks.queue_bound import earliest_waits, one_queue, places
from zen_dev.sim.jobs import SimJob, load_jobs
from zen_dev.sim.runner import run_policies
from zen_dev.sim.scenario import load_scenario, parse_scenario

REGIONS = ("us-central1", "us-west1")


def scenario(steps: str = "", default: int = 0, max_vms: int = 100, per_region: int = 100) -> object:
    """Two regions of one zone each; ``steps`` "AT:ZONE:CAPACITY ..." (zone a or b: the first region's or
    the second's)."""
    rows = "\n".join(f"    - {{at_s: {at}, zone: {REGIONS[zone == 'b']}-a, capacity: {cap}}}"
                     for at, zone, cap in (s.split(":") for s in steps.split()))
    text = f"""seed: 1
clusters:
  - {{name: c, gpu_count: 1, machine_type: m1, regions: [{', '.join(REGIONS)}], max_vms_per_region: {per_region},
     max_vms: {max_vms}}}
zones:
  {REGIONS[0]}: [{REGIONS[0]}-a]
  {REGIONS[1]}: [{REGIONS[1]}-a]
capacity:
  default: {default}
  schedule:
{rows or "    []"}
"""
    return parse_scenario(text.replace("schedule:\n    []", "schedule: []"))


def jobs(*spec: tuple[float, float], regions: tuple[str, ...] = REGIONS) -> list[SimJob]:
    return [SimJob(f"j{i}", "c", at, duration, regions) for i, (at, duration) in enumerate(spec)]


def test_places_come_with_each_zones_highest_capacity_so_far_within_the_limits():
    # a: 1 place at 0, 3 at 100, down to 0 at 200 (kept: a standard VM keeps its place); b: 2 at 300.
    grown = scenario("0:a:1 100:a:3 200:a:0 300:b:2")
    assert places(grown, grown.clusters[0], 1000.0, 10) == [0.0, 100.0, 100.0, 300.0, 300.0]
    assert places(grown, grown.clusters[0], 1000.0, 2) == [0.0, 100.0]  # no more than the jobs need
    assert places(grown, grown.clusters[0], 250.0, 10) == [0.0, 100.0, 100.0]  # the horizon ends it
    capped = scenario("0:a:1 100:a:3 200:a:0 300:b:2", max_vms=4, per_region=2)
    assert places(capped, capped.clusters[0], 1000.0, 10) == [0.0, 100.0, 300.0, 300.0]


def test_each_job_in_arrival_order_takes_the_place_free_first():
    two = scenario(default=1)  # one place a region: two in all
    waits = earliest_waits(two, jobs((0, 10), (0, 10), (0, 10), (5, 10)), horizon_s=1000.0)
    assert waits == pytest.approx([0, 0, 5, 10])  # the third at 10 (wait 10), the fourth at 10 (wait 5)
    # A later job never starts before an earlier one, even where a place is free for it.
    waits = earliest_waits(scenario(default=1, max_vms=1), jobs((0, 100), (50, 1)), horizon_s=1000.0)
    assert waits == pytest.approx([0, 50])


def test_a_job_with_no_place_before_the_horizon_waits_until_it():
    late = scenario("500:a:1")
    assert earliest_waits(late, jobs((0, 10), (100, 10)), horizon_s=300.0) == pytest.approx([200, 300])
    assert earliest_waits(scenario(), jobs((0, 10)), horizon_s=300.0) == pytest.approx([300])


def test_a_cluster_is_one_queue_only_if_no_job_can_be_passed():
    one = scenario(default=1)
    assert one_queue(one, jobs((0, 10), (5, 10))) is None
    assert one_queue(one, jobs((0, 10), (5, 10), regions=REGIONS[:1])) == "jobs kept to some regions"
    kept = jobs((0, 10), (5, 10))
    kept[1] = SimJob("j1", "c", 5, 10, REGIONS, priority=1)
    assert one_queue(one, kept) == "priorities"
    kept[1] = SimJob("j1", "c", 5, 10, REGIONS, nodes=2)
    assert one_queue(one, kept) == "gangs"
    kept[1] = SimJob("j1", "c", 5, 10, REGIONS, provisioning="standard")
    assert one_queue(one, kept) == "jobs kept to some models"


def test_no_policy_in_the_simulator_starts_a_job_earlier_than_the_bound():
    burst = load_scenario("burst-200")  # 200 jobs at once, every place busy for hours
    loaded = load_jobs(burst)
    assert one_queue(burst, loaded) is None
    runs = run_policies(burst, loaded, ["zen", "cheapest-first", "ask-every-region"], seed=burst.spec.seed)
    least = earliest_waits(burst, loaded, next(iter(runs.values())).horizon_s)
    assert least[len(least) // 2] > 1000  # the places bind: the bound is not 0 s
    for policy, run in runs.items():
        waits = sorted(run.waits())
        assert len(waits) == len(least)
        assert all(w >= b - 1e-6 for w, b in zip(waits, least)), policy  # every order statistic at least
