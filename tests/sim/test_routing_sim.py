"""Zen's start routing by data in the simulator (zen.core.routing as zen_dev.sim.world models it): a data job is
offered first to its data's region, so an idle VM elsewhere does not take it, and the run reads less
input across regions; the baselines are not routed."""

from __future__ import annotations

from zen_dev.sim.jobs import load_jobs
from zen_dev.sim.runner import run_policies

from tests.sim.helpers import scenario

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
