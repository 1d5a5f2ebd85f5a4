"""A job's own start bound in the simulator (production's request ``max_start_wait_s``): from a job CSV's column or
the synthetic trace's weights, grouped as production's queued demand groups it, and ranked by it."""

from __future__ import annotations

import json

import pytest

from zen_dev.capacity.yamllines import ScenarioError
from zen_dev.sim.cli import main
from zen_dev.sim.jobs import JobTraceError, SimJob, load_jobs
from zen_dev.sim.runner import run_policies
from zen_dev.sim.scenario import parse_scenario

# One region: standard VMs at $6/h now, flex-start at $3/h granted after a 900 s queue.
SCENARIO = """
seed: 2
clusters:
  - {name: c, gpu_count: 1, machine_type: a2-highgpu-1g, regions: [r1], max_vms_per_region: 4, max_vms: 4,
     provisioning: [standard, flex-start]}
zones: {r1: [r1-a]}
capacity: {default: 4}
boot: {dist: fixed, s: 60}
flex_start: {grant: {dist: fixed, s: 900}}
preempt_on_capacity_drop: false
prices: {r1: {standard: 6.0, flex-start: 3.0}}
"""


def test_a_job_that_may_wait_takes_the_cheaper_queued_pool_and_one_that_may_not_the_faster():
    """Without its own bound a job's demand may take a pool expected within ``cost_slack_s`` of the fastest: the
    flex-start queue (900 s) is not, so it ran on a standard VM. A job that names two hours may wait for it: it
    runs at half the price, later. Before, the simulator gave every job its cluster's bound, so a harness could not
    replay jobs that say how long they may wait."""
    scenario = parse_scenario(SCENARIO, source="s.yaml", name="s")

    def run(wait: float | None):
        job = SimJob("j", "c", 0.0, 3600.0, ("r1",), max_start_wait_s=wait)
        return run_policies(scenario, [job], ["zen"], horizon_s=10_000)["zen"]

    hurried, patient = run(None), run(7200.0)
    assert hurried.starts[0][1] < 300 < 900 <= patient.starts[0][1]
    assert 6.0 < hurried.usd < 7.0 and 3.0 < patient.usd < 3.5  # an hour's run, its boot and idle minutes


def test_the_bound_comes_from_a_csv_column_or_synthetic_weights_and_a_bad_one_is_refused(tmp_path, capsys):
    scenario = parse_scenario(SCENARIO, source="s.yaml", name="s")
    csv = tmp_path / "jobs.csv"
    csv.write_text("job_id,submit_s,duration_s,cluster,max_start_wait_s\na,0,600,c,7200\nb,0,600,c,\n")
    assert [j.max_start_wait_s for j in load_jobs(scenario, str(csv))] == [7200.0, None]
    csv.write_text("job_id,submit_s,duration_s,cluster,max_start_wait_s\na,0,600,c,-1\n")
    with pytest.raises(JobTraceError, match="max_start_wait_s is seconds >= 0"):
        load_jobs(scenario, str(csv))
    jobs = ("jobs: {kind: synthetic, count: 200, arrivals: {kind: poisson, rate_per_hour: 60}, "
            "duration: {dist: fixed, s: 600}, max_start_wait_s: {600: 1, 7200: 3}}\n")
    drawn = load_jobs(parse_scenario(SCENARIO + jobs, source="s.yaml", name="s"))
    assert {j.max_start_wait_s for j in drawn} == {600.0, 7200.0}
    assert 100 < sum(j.max_start_wait_s == 7200.0 for j in drawn) < 190
    plain = load_jobs(parse_scenario(SCENARIO + jobs.replace(", max_start_wait_s: {600: 1, 7200: 3}", ""),
                                     source="s.yaml", name="s"))
    assert [(j.submit_s, j.regions) for j in plain] == [(j.submit_s, j.regions) for j in drawn]  # its own draws
    with pytest.raises(ScenarioError, match="a start bound is seconds >= 0"):
        parse_scenario(SCENARIO + jobs.replace("{600: 1,", "{-5: 1,"), source="s.yaml", name="s")
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO + jobs.replace("count: 200", "count: 20").replace("rate_per_hour: 60", "rate_per_hour: 6"))
    assert main(["--scenario", str(path), "--policies", "zen,cheapest-first", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["policies"]["zen"]["never_started"] == 0


def test_a_flex_start_alone_job_is_held_to_its_own_bound(tmp_path):
    """Production refuses a job accepting flex-start alone whose start bound (its own first) is below the
    cluster's ``flex_start_min_wait_s``: so does the simulator, naming the job's own bound."""
    flex_only = SCENARIO.replace("[standard, flex-start]", "[flex-start]").replace(
        "standard: 6.0, ", "").replace("max_vms: 4,", "max_vms: 4, max_start_wait_s: 3600,")
    scenario = parse_scenario(flex_only, source="s.yaml", name="s")
    csv = tmp_path / "jobs.csv"
    csv.write_text("job_id,submit_s,duration_s,cluster,max_start_wait_s\na,0,600,c,60\n")
    with pytest.raises(JobTraceError, match=r"job a accepts flex-start alone, and its max_start_wait_s \(60 s\)"):
        load_jobs(scenario, str(csv))
