"""``zen simulate`` stops each job's run at its max_runtime_s, as production's agent does, for every policy.

Production caps a job's run at its own ``max_runtime_s``, itself at most the configuration's
``limits.max_runtime_s`` (7 days by default, and the job's value when its request names none): the agent
stops the job there, and it ends FAILED, never rerun. The simulator ran every trace job to its end, so the
30-day replay (Philly jobs of up to 15 days) billed and counted runs production never makes.
"""

from __future__ import annotations

import json

from zen_dev.sim.cli import main
from zen_dev.sim.jobs import SimJob
from zen_dev.sim.policies import POLICY_NAMES, make_policy
from zen_dev.sim.scenario import parse_scenario
from zen_dev.sim.world import Simulation

# Every policy runs here: capacity never drops, both models are priced (ask-every-region-standard runs standard).
SCENARIO = """
seed: 1
horizon_s: {horizon}
tick_s: {tick}
clusters:
  - {{name: c4, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-central1], max_vms_per_region: 8,
     max_vms: 8}}
zones: {{us-central1: [us-central1-a]}}
capacity: {{default: 8}}
boot: {{dist: fixed, s: 60}}
prices: {{us-central1: {{spot: 1.0, standard: 2.0}}}}
{extra}
"""

# j1 runs past the scenario's limit (1 h), j2 within it, j3 past its own max_runtime_s (20 min), and gang g1
# (2 nodes) past the limit on both nodes.
JOBS = """job_id,submit_s,duration_s,cluster,regions,priority,nodes,max_runtime_s
j1,0,7200,c4,,,,
j2,0,600,c4,,,,
j3,0,3000,c4,,,,1200
g1,0,7200,c4,,,2,
"""


def _simulate(tmp_path, capsys, scenario: str, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "s.yaml"
    path.write_text(scenario)
    rc = main(["--scenario", str(path), "--json", "--policies", ",".join(POLICY_NAMES), *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_every_policy_stops_a_run_at_its_jobs_max_runtime_s_and_counts_it_failed(tmp_path, capsys):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(JOBS)
    text = SCENARIO.format(horizon=20000, tick=60, extra="limits: {max_runtime_s: 3600}")
    rc, out, err = _simulate(tmp_path, capsys, text, "--jobs", str(jobs))
    assert rc == 0, err
    policies = json.loads(out)["policies"]
    assert set(policies) == set(POLICY_NAMES)
    # Useful GPU-hours are the runs as production makes them: j1 1 h (its limit), j2 10 min, j3 20 min (its own),
    # g1 1 h on each of 2 nodes; 4 GPUs each. Run to their ends they were 2 h + 10 min + 50 min + 2 x 2 h.
    capped = (3600 + 600 + 1200 + 2 * 3600) * 4 / 3600
    ran = {name: (summary.get("stopped_at_max_runtime"), summary["useful_gpu_hours"])
           for name, summary in policies.items()}
    assert ran == {name: (3, capped) for name in POLICY_NAMES}, (
        f"(jobs stopped at their max_runtime_s, useful GPU-h) per policy; production: (3, {capped}), "
        f"every run to its end: {(7200 + 600 + 3000 + 2 * 7200) * 4 / 3600}")
    for name, summary in policies.items():
        assert summary["never_started"] == 0 and summary["rework_gpu_hours"] == 0, name


def test_a_job_with_no_limits_section_is_stopped_at_production_s_default_of_7_days(tmp_path, capsys):
    """No ``limits:``: a trace job without a max_runtime_s gets production's cap, 7 days (an 8-day job stops there)."""
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,submit_s,duration_s,cluster\nlong,0,691200,c4\n")
    text = SCENARIO.format(horizon=9 * 86400, tick=3600, extra="")
    rc, out, err = _simulate(tmp_path, capsys, text, "--jobs", str(jobs))
    assert rc == 0, err
    ran = {name: (summary.get("stopped_at_max_runtime"), summary["useful_gpu_hours"])
           for name, summary in json.loads(out)["policies"].items()}
    assert ran == {name: (1, 7 * 24 * 4) for name in POLICY_NAMES}, "(stopped, useful GPU-h): 8 days ran as 7"


def test_a_job_whose_own_max_runtime_s_is_above_the_limit_is_refused_as_production_refuses_it(tmp_path, capsys):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,submit_s,duration_s,cluster,max_runtime_s\nj1,0,600,c4,7200\n")
    text = SCENARIO.format(horizon=20000, tick=60, extra="limits: {max_runtime_s: 3600}")
    rc, out, err = _simulate(tmp_path, capsys, text, "--jobs", str(jobs))
    assert rc == 2, f"ran a job production refuses (max_runtime_s 7200 above limits.max_runtime_s 3600): {out[:300]}"
    assert f"{jobs}: job j1: max_runtime_s 7200 is above the limit 3600 (limits.max_runtime_s)" in err, err


def test_a_rerun_after_a_preemption_gets_the_whole_max_runtime_s_again():
    """As production's: each attempt runs up to the job's max_runtime_s. The spot VM is taken back at 1,000 s (its
    first run, from 100 s, thrown away: no checkpoint); the rerun, from 1,200 s, is stopped 3,000 s later."""
    scenario = parse_scenario("""
clusters: [{name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [r1], max_vms_per_region: 1, max_vms: 1}]
zones: {r1: [r1-a]}
capacity: {default: 1, schedule: [{at_s: 1000, zone: r1-a, capacity: 0}, {at_s: 1100, zone: r1-a, capacity: 1}]}
boot: {dist: fixed, s: 100}
limits: {max_runtime_s: 3000}
""", source="t.yaml")
    result = Simulation(scenario, [SimJob("j", "c", 0.0, 5000.0, ("r1",))], make_policy("single-region"),
                        horizon_s=9000).run()
    assert result.preemptions == 1
    assert (result.stopped_at_max_runtime, result.useful_gpu_seconds, result.lost_seconds) == (1, 3000 * 4, 900)
