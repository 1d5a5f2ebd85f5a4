"""Zen's start routing by data in the simulator (zen.core.routing as zen_dev.sim.world models it): a data job is
offered first to its data's region, so an idle VM elsewhere does not take it, and the run reads less
input across regions; the baselines are not routed."""

from __future__ import annotations

from zen_dev.sim.jobs import load_jobs
from zen_dev.sim.policies import make_policy
from zen_dev.sim.runner import run_policies
from zen_dev.sim.world import Simulation

from tests.sim.helpers import Recording, scenario

# Four jobs warm four us-central1 VMs; three jobs reading 20 GB kept in europe-west4 come while those
# VMs are idle.
TRACE = ("job_id,submit_s,duration_s,cluster,regions,priority,input_gb,data_region\n"
         + "".join(f"warm-{i},0,300,4xa100,us-central1,,,\n" for i in range(4))
         + "".join(f"data-{i},380,600,4xa100,,,20,europe-west4\n" for i in range(3)))


def run_zen(tmp_path, routing: str):
    trace = tmp_path / "jobs.csv"
    trace.write_text(TRACE)
    sc = scenario("default: 4", extra=f"boot: {{dist: fixed, s: 60}}\nrouting: {routing}")
    return run_policies(sc, load_jobs(sc, str(trace)), ["zen", "ask-every-region"])


def test_routing_by_data_keeps_data_jobs_off_idle_vms_elsewhere(tmp_path):
    unrouted = run_zen(tmp_path, "{data_wait_s: 0}")["zen"]
    routed = run_zen(tmp_path, "{data_wait_s: 120, route_min_gb: 10}")
    assert unrouted.input_gb_cross_region == 60  # the idle us-central1 VMs took all three
    assert routed["zen"].input_gb_cross_region == 0  # booted next to their data instead
    data_starts = [region for t, region in routed["zen"].start_regions if t >= 380]
    assert data_starts == ["europe-west4"] * 3
    waits = sorted(start - submit for submit, start in routed["zen"].starts if submit == 380)
    assert waits[-1] < 120 + 60  # before the widening could have moved them


def test_a_job_lighter_than_route_min_gb_is_not_routed(tmp_path):
    routed = run_zen(tmp_path, "{data_wait_s: 120, route_min_gb: 50}")["zen"]
    assert routed.input_gb_cross_region == 60


def test_a_narrowed_job_is_widened_at_the_first_tick_after_the_wait(tmp_path):
    # europe-west4 has no capacity but is not blocked yet when the jobs come: they wait there, then widen.
    trace = tmp_path / "jobs.csv"
    trace.write_text(TRACE)
    sc = scenario("""schedule:
    - {at_s: 0, zone: europe-west4-a, capacity: 0}
  default: 4""", extra="boot: {dist: fixed, s: 60}\nrouting: {data_wait_s: 30}\nlist_errors_delay_s: 600")
    result = run_policies(sc, load_jobs(sc, str(trace)), ["zen"])["zen"]
    late = [start for submit, start in result.starts if submit == 380]
    assert all(start is not None and 380 + 30 <= start <= 380 + 30 + 60 + 60 + 1 for start in late), late
    assert result.input_gb_cross_region == 60  # widened: they ran away from their data rather than wait


# Two VMs in us-central1: "a" leaves its dataset in one's cache at 360, "b" frees the other at 370; "c"
# reads the same dataset at 375, when both are idle and the holder is not the most recently idle.
CACHE_TRACE = ("job_id,submit_s,duration_s,cluster,regions,priority,input_gb,data_region,dataset\n"
               "a,0,300,4xa100,us-central1,,20,us-central1,ds\n"
               "b,0,310,4xa100,us-central1,,,,\n"
               "c,375,300,4xa100,us-central1,,20,us-central1,ds\n")


def run_cached(tmp_path, routing: str):
    trace = tmp_path / "jobs.csv"
    trace.write_text(CACHE_TRACE)
    sc = scenario("default: 4", extra=f"boot: {{dist: fixed, s: 60}}\nrouting: {routing}")
    return run_policies(sc, load_jobs(sc, str(trace)), ["zen"])["zen"]


def test_zen_offers_a_job_to_the_idle_vm_whose_cache_holds_its_dataset_and_counts_the_staging_saved(tmp_path):
    warm = run_cached(tmp_path, "{data_wait_s: 30, cache_gb: 50, staging_mb_s: 200}")
    assert (warm.cache_hits, warm.cache_misses) == (1, 1)
    assert warm.extras()["staging_min_saved"] == round(20 * 1000 / 200 / 60, 1)
    unrouted = run_cached(tmp_path, "{data_wait_s: 0, cache_gb: 50}")  # the most recently idle VM takes it
    assert (unrouted.cache_hits, unrouted.cache_misses) == (0, 2)
    assert run_cached(tmp_path, "{data_wait_s: 30, cache_gb: 10}").cache_hits == 0  # 20 GB do not fit in 10


def run_widened(tmp_path, data_region: str) -> tuple[Simulation, Recording]:
    """busy holds the cluster's one VM (us-central1's) from 60 to 460; d (20 GB kept in ``data_region``)
    comes at 5 and widens at the first tick after 30 s; p, plain, comes at 20. Neither us-west1 nor
    europe-west4 has room, and neither is known blocked before d widens."""
    trace = tmp_path / "jobs.csv"
    trace.write_text("job_id,submit_s,duration_s,cluster,regions,priority,input_gb,data_region\n"
                     "busy,0,400,4xa100,us-central1,,,\n"
                     f"d,5,300,4xa100,,,20,{data_region}\n"
                     "p,20,300,4xa100,,,,\n")
    sc = scenario("""schedule:
    - {at_s: 0, zone: us-west1-a, capacity: 0}
    - {at_s: 0, zone: europe-west4-a, capacity: 0}
  default: 1""", per_region=1, max_vms=1,
                  extra="boot: {dist: fixed, s: 60}\nrouting: {data_wait_s: 30}\nlist_errors_delay_s: 600")
    policy = Recording(make_policy("zen"))
    sim = Simulation(sc, load_jobs(sc, str(trace)), policy, horizon_s=3000)
    sim.run()
    return sim, policy


def test_a_widened_start_takes_its_turn_elsewhere_from_its_widening_and_keeps_its_queued_at(tmp_path):
    """As production: a start routed to its data's region and widened is published again to the others
    then, so a job published there before the widening starts first; the job keeps its ``queued_at``."""
    sim, _ = run_widened(tmp_path, "europe-west4")
    jobs = {job.spec.job_id: job for job in sim.jobs}
    assert jobs["p"].first_start_s == 460.0  # us-central1's VM, free at 460, takes p, published at 20, ...
    assert jobs["d"].first_start_s == 760.0  # ... before d, published there at its widening (after 35)
    assert jobs["d"].queued_s == 5.0 and jobs["d"].published_s > 35.0


def test_a_widened_job_keeps_its_turn_in_its_data_region_and_its_group_counts_from_the_oldest(tmp_path):
    """d's data is in us-central1: widened, it joins p's group (the cluster's order) after p but was queued
    before it, so the group's oldest is d's (production's min(queued_at)), and us-central1's VM takes d first,
    whose start was published there at 5."""
    sim, policy = run_widened(tmp_path, "us-central1")
    jobs = {job.spec.job_id: job for job in sim.jobs}
    assert jobs["d"].first_start_s == 460.0 and jobs["p"].first_start_s == 760.0
    t0 = sim.dt(0)
    both = [g for s in policy.snapshots if 60 < (s.now - t0).total_seconds() < 460
            for g in s.demand_groups() if g.count == 2]
    assert both and all((g.oldest - t0).total_seconds() == 5.0 for g in both)
