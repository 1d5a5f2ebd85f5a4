"""``zen simulate`` as an outside harness uses it: scenario files written from docs/reference/simulator.md,
run through the CLI's ``--json``. Each case is one the simulator got wrong before (a crash, a capacity or a
flex-start grant read otherwise than production has it, dollars split wrongly, a trace read at another
compression, a skip with the wrong reason; input that crashed, hung or ran nothing, now refused)."""

from __future__ import annotations

import json

import pytest

from zen_dev.sim.cli import main
from zen_dev.sim.jobs import SimJob
from zen_dev.sim.policies import make_policy
from zen_dev.sim.scenario import parse_scenario
from zen_dev.sim.world import Simulation


def _cli(tmp_path, capsys, scenario: str, *args: str, jobs_csv: str | None = None):
    path = tmp_path / "s.yaml"
    path.write_text(scenario)
    argv = ["--scenario", str(path), "--json", *args]
    if jobs_csv is not None:
        csv = tmp_path / "jobs.csv"
        csv.write_text(jobs_csv)
        argv += ["--jobs", str(csv)]
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, (json.loads(out)["policies"] if rc == 0 and out.strip() else None), err


# 1. ask-every-region crashed on a gang in a flex-start pool -------------------------------------------
FLEX_GANG = """
seed: 1
clusters:
  - {name: c8, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [us-central1, us-west1],
     max_vms_per_region: 4, max_vms: 8, provisioning: [flex-start]}
zones: {us-central1: [us-central1-a], us-west1: [us-west1-a]}
capacity:
  default: 2
  schedule:
    - {at_s: 0, zone: us-west1-a, capacity: 0}
flex_start: {grant: {dist: fixed, s: 60}}
prices:
  us-central1: {flex-start: 3}
  us-west1: {flex-start: 3}
jobs: {kind: synthetic, count: 1, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 600}, nodes: {2: 1}}
"""


def test_ask_every_region_gang_on_flex_start_does_not_crash(tmp_path, capsys):
    # The gang assembles in us-central1; its copy in us-west1 is one resize request of 2 VMs still
    # waiting. Cancelling the first loser cancels the whole request (deleting the second VM too), and
    # the loop then deleted the second again: KeyError out of Simulation.run.
    rc, policies, err = _cli(tmp_path, capsys, FLEX_GANG, "--policies", "ask-every-region")
    assert rc == 0, err
    assert policies["ask-every-region"]["never_started"] == 0


# 2. one model's own capacity in one zone threw away the machine type's capacity in the others ------
PARTIAL_MODEL_CAPACITY = """
seed: 1
clusters:
  - {name: c8, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [us-west1],
     max_vms_per_region: 8, max_vms: 8, provisioning: [spot]}
zones: {us-west1: [us-west1-a, us-west1-b]}
capacity:
  default: unlimited
  schedule:
    - {at_s: 0, zone: us-west1-b, machine_type: a2-highgpu-8g, capacity: 0}          # no A100s in b
    - {at_s: 0, zone: us-west1-a, machine_type: a2-highgpu-8g, model: spot, capacity: 1}  # spot's own in a
prices:
  us-west1: {spot: 2}
jobs: {kind: synthetic, count: 5, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 3600}}
"""


def test_a_models_own_capacity_in_one_zone_keeps_the_machine_types_capacity_elsewhere(tmp_path, capsys):
    # Doc: "a model without one draws on the machine type's". us-west1-b has 0 a2-highgpu-8g; spot has
    # its own capacity only in us-west1-a (1). At most 1 spot VM can exist; spot VMs in us-west1-b
    # read the scenario default (unlimited) instead of the machine type's 0: peak 5, every job started.
    rc, policies, err = _cli(tmp_path, capsys, PARTIAL_MODEL_CAPACITY, "--policies", "single-region")
    assert rc == 0, err
    assert policies["single-region"]["peak_vms"] <= 1
    assert policies["single-region"]["never_started"] == 4


# 3. a gang's thrown-away runs were billed as useful (usd_useful / usd_above_floor) ------------------------
ONE_PRICE_PREEMPTED = """
seed: 3
boot: {dist: fixed, s: 60}
preemption: {rate_per_hour: 1.0}
clusters:
  - {name: c1, gpu_count: 1, machine_type: a2-highgpu-1g, regions: [us-central1],
     max_vms_per_region: 8, max_vms: 8, provisioning: [spot]}
capacity: {default: unlimited}
prices:
  us-central1: {spot: 3600}
"""


def test_a_gangs_rework_is_billed_as_rework_not_as_useful_work(tmp_path, capsys):
    # One price everywhere ($1 per GPU-second), so every dollar of rework is usd_rework and nothing
    # can be above the floor. A 2-node gang is preempted several times: only the preempted node's
    # lost run landed in usd_rework; the other node's was counted in usd_useful, so
    # usd_above_floor ("what running in dearer regions and models cost") was thousands of dollars.
    jobs = "job_id,submit_s,duration_s,cluster,regions,priority,nodes\ng1,0,7200,c1,,,2\n"
    rc, policies, err = _cli(tmp_path, capsys, ONE_PRICE_PREEMPTED, "--policies", "single-region", jobs_csv=jobs)
    assert rc == 0, err
    p = policies["single-region"]
    assert p["rework_gpu_hours"] > 0
    assert p["usd_above_floor"] == pytest.approx(0, abs=0.05)
    assert p["usd_rework"] == pytest.approx(p["rework_gpu_hours"] * 3600, rel=0.01)
    assert p["usd_useful"] == pytest.approx(p["useful_gpu_hours"] * 3600, rel=0.01)


# 4. a flex-start request was granted across zones (production's flex-start MIG is ANY_SINGLE_ZONE) ----
FLEX_TWO_ZONES = """
seed: 1
clusters:
  - {name: c8, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [us-central1],
     max_vms_per_region: 8, max_vms: 8, provisioning: [flex-start]}
zones: {us-central1: [us-central1-a, us-central1-b]}
capacity: {default: 2}
flex_start: {grant: {dist: fixed, s: 60}}
prices: {us-central1: {flex-start: 3}}
"""


def test_a_flex_start_request_is_granted_in_one_zone(tmp_path, capsys):
    # Two zones of 2 VMs each; a 3-node gang asks for one resize request of 3. terraform/compute.tf
    # makes flex-start MIGs ANY_SINGLE_ZONE ("granted all at once in one zone"), and the Compute
    # stand-in (zen_dev/local/compute/resize_requests.py) grants only where one zone holds them all:
    # never, here. The simulator summed the free capacity of all zones and granted it 2 + 1.
    jobs = "job_id,submit_s,duration_s,cluster,regions,priority,nodes\ng,0,600,c8,,,3\n"
    rc, policies, err = _cli(tmp_path, capsys, FLEX_TWO_ZONES, "--policies", "single-region", "--horizon-s", "5000",
                             jobs_csv=jobs)
    assert rc == 0, err
    assert policies["single-region"]["never_started"] == 1


# 5. one flex-start request that cannot be granted blocked every later one in its MIG for ever ---------
FLEX_ONE_ZONE = """
seed: 1
clusters:
  - {name: c8, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [us-central1],
     max_vms_per_region: 8, max_vms: 8, provisioning: [flex-start]}
zones: {us-central1: [us-central1-a]}
capacity: {default: 2}
flex_start: {grant: {dist: fixed, s: 60}}
prices: {us-central1: {flex-start: 3}}
"""


def test_an_ungrantable_flex_start_request_does_not_block_later_ones(tmp_path, capsys):
    # A 4-node gang (the zone holds 2) asks first; two 1-node jobs follow. Neither 1-node job started in
    # 20000 s under any policy (the MIG's requests were granted strictly in order); the Compute stand-in
    # grants each request on its own.
    jobs = ("job_id,submit_s,duration_s,cluster,regions,priority,nodes\n"
            "big,0,600,c8,,,4\ns1,100,600,c8,,,1\ns2,200,600,c8,,,1\n")
    rc, policies, err = _cli(tmp_path, capsys, FLEX_ONE_ZONE, "--policies", "single-region,zen", "--horizon-s", "20000",
                             jobs_csv=jobs)
    assert rc == 0, err
    for name in ("single-region", "zen"):
        assert policies[name]["never_started"] == 1, name  # only the gang that can never fit


# 6. a Philly-format file given to --jobs was read 10x slower than --jobs philly --------------------------
def test_a_philly_file_given_to_jobs_reads_as_jobs_philly_does(tmp_path):
    # Doc: "a file given to --jobs is read as Philly or Zen CSV by its header"; kind: philly's
    # compression defaults to 10. The same file through --jobs philly and --jobs FILE gives arrivals and
    # durations 10x apart (csv_jobs passed compression 1.0 to philly_jobs).
    from pathlib import Path

    from zen_dev.sim.jobs import load_jobs
    from zen_dev.sim.scenario import traces_dir
    philly = traces_dir() / "philly-jobs" / "philly_jobs_ge4gpu.csv"
    if not philly.exists():
        pytest.skip("Philly trace absent")
    scenario = parse_scenario("clusters: [{name: c8, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [r1], "
                              "max_vms_per_region: 4, max_vms: 4}]\n")
    by_kind = load_jobs(scenario, "philly", max_jobs=20)
    by_file = load_jobs(scenario, str(Path(philly)), max_jobs=20)
    assert [(j.submit_s, j.duration_s) for j in by_file] == [(j.submit_s, j.duration_s) for j in by_kind]


# 7. a baseline skipped for want of a price was reported as "not importable yet" ---------------------------
def test_a_baseline_skipped_for_want_of_a_price_says_so(tmp_path, capsys):
    # Doc: "a baseline whose models a priced scenario does not price is skipped". The CLI's note said
    # "skipped (not importable yet)" (the wording for a missing zen planner), exit 0 and {"policies": {}},
    # so a harness could not tell a missing price from a broken install.
    rc, policies, err = _cli(tmp_path, capsys, FLEX_ONE_ZONE, "--policies", "ask-every-region-standard")
    assert "not importable" not in err
    assert "standard" in err and "price" in err


# 8. inputs that crashed, hung or ran nothing: refused with exit 2, naming what to change -----------
SMALL = """
seed: 1
clusters:
  - {name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [r1], max_vms_per_region: 2, max_vms: 2,
     provisioning: [spot, standard]}
prices: {r1: {spot: 1, standard: 3}}
capacity: {default: 2}
jobs: {kind: synthetic, count: 4, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 600}}
"""
HEADER = "job_id,submit_s,duration_s,cluster,regions,priority\n"


@pytest.mark.parametrize("extra, args, csv, said", [
    ("", (), HEADER + "j1,0,600,c,,\nj1,0,600,c,,\n", "job id 'j1' is on line 2 too"),  # was a KeyError
    ("horizon_s: .inf\n", (), None, "horizon_s"),  # these three ran forever
    ("preemption: {rate_per_hour: .inf}\n", (), None, "rate_per_hour"),
    ("", (), HEADER + "j1,inf,600,c,,\n", "submit_s is a finite number"),
    ("", (), HEADER + "j1,nan,600,c,,\nj2,0,600,c,,\n", "submit_s is a finite number"),  # ran nothing, exit 0
    ("", ("--horizon-s", "nan"), None, "--horizon-s is a finite number > 0"),
    ("", ("--horizon-s", "-100"), None, "--horizon-s is a finite number > 0"),
    ("", ("--horizon-s", "1e12"), None, "ticks of 60 s (tick_s)"),
    ("", ("--compression", "5"), None, "synthetic jobs"),  # was ignored without a word
    ("", (), HEADER + "j1,0,600,c,,\nj2,0,600,c,,1e3\n", "priority is an integer (got '1e3')"),
    ("", (), HEADER + "j1,-600,600,c,,\n", "line 2: submit_s is seconds >= 0 (got -600)"),  # started before t=0
    ("", (), HEADER + "j1,0,-300,c,,\n", "line 2: duration_s is seconds >= 0 (got -300)"),  # ran as 1 s
    ("", (), "job_id,submit_s,duration_s,cluster,regions,priority,checkpoint_every_s\nj1,0,600,c,,0,10\n",
     "line 2: checkpoint_every_s is seconds from 30 to 604800 (got 10)"),  # saves Zen refuses, modelled
])
def test_inputs_that_cannot_run_are_refused_naming_what_to_change(tmp_path, capsys, extra, args, csv, said):
    rc, _, err = _cli(tmp_path, capsys, SMALL + extra, "--policies", "zen,cheapest-first", *args, jobs_csv=csv)
    assert (rc, said in err, err.count("\n")) == (2, True, 1), err


@pytest.mark.parametrize("jobs_extra, said", [
    ("checkpoint_every_s: .inf", "jobs.checkpoint_every_s"),  # rework came out negative
    ("checkpoint_every_s: 0", "jobs.checkpoint_every_s"),  # said jobs.SyntheticJobs.checkpoint_every_s, no line
    ("checkpoint_every_s: 5", "checkpoint_every_s must be >= 30"),  # a save a job's checkpoint.every refuses, run
    ("data: {fraction: 1, size_gb: .inf}", "jobs.data.size_gb"),  # "input_gb": Infinity in report.json
])
def test_a_jobs_section_that_cannot_run_is_refused_at_its_line(tmp_path, capsys, jobs_extra, said):
    scenario = SMALL.replace("duration: {dist: fixed, s: 600}}", f"duration: {{dist: fixed, s: 600}}, {jobs_extra}}}")
    rc, _, err = _cli(tmp_path, capsys, scenario, "--policies", "zen")
    assert (rc, err.count("\n")) == (2, 1) and "s.yaml line 8: " in err and said in err, err
    assert "SyntheticJobs" not in err


@pytest.mark.parametrize("jobs, said", [
    ("{kind: [synthetic], count: 3}", "jobs.kind"),  # a TypeError and a traceback, exit 1
    ("{kind: synthetic, nodes: {1: 5, '1': 3}}", "jobs.nodes.1 is given twice"),  # one weight dropped
])
def test_a_jobs_section_written_oddly_is_refused_not_crashed_or_folded(tmp_path, capsys, jobs, said):
    rc, _, err = _cli(tmp_path, capsys, SMALL.split("jobs:")[0] + f"jobs: {jobs}\n", "--policies", "zen")
    assert rc == 2 and said in err, err


TWO_SHAPES = """
clusters:
  - {name: a100x4, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [r1], max_vms_per_region: 2, max_vms: 2}
  - {name: a100x8, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [r1], max_vms_per_region: 2, max_vms: 2}
prices: {r1: {spot: 4.7, standard: 14.7}}
"""


def test_one_price_table_for_clusters_of_two_shapes_is_refused(tmp_path, capsys):
    # An 8-GPU VM billed as a 4-GPU one: half the dollars per GPU-hour, exit 0
    rc, _, err = _cli(tmp_path, capsys, TWO_SHAPES, "--policies", "zen")
    assert rc == 2 and "a100x4: a2-highgpu-4g, 4 GPUs, a100x8: a2-highgpu-8g, 8 GPUs" in err and "its own prices:" in err, err


def test_a_price_missing_for_the_model_a_cluster_was_given_says_how_it_was_chosen(tmp_path, capsys):
    scenario = """
clusters:
  - {name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [r1, r2], max_vms_per_region: 2, max_vms: 2}
prices:
  r1: {spot: 4.7, standard: 14.7}
  r2: {standard: 14.7}
"""
    rc, _, err = _cli(tmp_path, capsys, scenario, "--policies", "zen")  # blamed a provisioning list it has not
    assert rc == 2 and "prices.r2: no spot price; cluster c lists no provisioning:, so its VMs run as spot" in err, err


def test_a_model_a_region_does_not_price_runs_and_is_named_on_stderr(tmp_path, capsys):
    """A catalog-drawn table without standard in one region: every policy runs (it was exit 2, no figures), and
    the harness is told which pools sell nothing."""
    gap = SMALL.replace("regions: [r1]", "regions: [r1, r2]").replace(
        "prices: {r1: {spot: 1, standard: 3}}", "prices: {r1: {spot: 1, standard: 3}, r2: {spot: 2}}")
    rc, policies, err = _cli(tmp_path, capsys, gap)
    assert rc == 0 and policies["zen"]["never_started"] == 0 and "ask-every-region-standard" in policies, err
    assert "note: not priced, so not sold: c: standard in r2" in err, err


def test_a_policy_asked_for_by_name_that_cannot_run_is_an_error(tmp_path, capsys):
    spot_only = SMALL.replace("provisioning: [spot, standard]", "provisioning: [spot]").replace(
        "prices: {r1: {spot: 1, standard: 3}}", "prices: {r1: {spot: 1}}")
    rc, policies, err = _cli(tmp_path, capsys, spot_only, "--policies", "zen,ask-every-region-standard")
    assert rc == 2 and "ask-every-region-standard runs standard VMs" in err, (rc, policies, err)  # was {} and exit 0
    rc, policies, err = _cli(tmp_path, capsys, spot_only)  # every policy (the default): skipped with a note
    assert rc == 0 and "zen" in policies and "ask-every-region-standard" not in policies
    assert err.count("ask-every-region-standard") == 1, err


def test_max_jobs_keeps_the_first_synthetic_jobs_and_a_byte_order_mark_is_no_column(tmp_path, capsys):
    rc, _, err = _cli(tmp_path, capsys, SMALL, "--policies", "zen", "--out", str(tmp_path / "o"), "--max-jobs", "1")
    assert rc == 0, err
    assert json.loads((tmp_path / "o" / "report.json").read_text())["policies"]["zen"]["jobs"] == 1  # of 4
    rc, policies, err = _cli(tmp_path, capsys, SMALL, "--policies", "zen", jobs_csv="\ufeff" + HEADER + "j1,0,600,c,,\n")
    assert rc == 0 and policies["zen"]["never_started"] == 0, err


# A model's own capacity before its series starts, and a compressed CSV's checkpoints -----------------------
SPOT_SERIES_LATER = """
clusters: [{name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [r1], max_vms_per_region: 8, max_vms: 8}]
zones: {r1: [r1-a]}
capacity:
  default: unlimited
  schedule:
    - {at_s: 0, zone: r1-a, machine_type: a2-highgpu-4g, capacity: 1}
    - {at_s: 3600, zone: r1-a, machine_type: a2-highgpu-4g, model: spot, capacity: 1}
boot: {dist: fixed, s: 100}
"""


def test_a_models_own_series_not_yet_started_reads_the_machine_types_not_the_default():
    """Spot's own series starts an hour in; before it, spot VMs read the scenario's default (unlimited), not
    the machine type's capacity of 1: five VMs ran at once where the trace allowed one."""
    scenario = parse_scenario(SPOT_SERIES_LATER, source="t.yaml")
    assert scenario.capacity.capacity("r1-a", "a2-highgpu-4g@spot", 0) == 1
    assert scenario.capacity.capacity("r1-a", "a2-highgpu-4g@spot", 3600) == 1
    jobs = [SimJob(f"j{i}", "c", 0.0, 600.0, ("r1",)) for i in range(5)]
    result = Simulation(scenario, jobs, make_policy("single-region"), horizon_s=3000).run()
    assert result.peak_vms == 1


PREEMPTED_ONCE = """
clusters: [{name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [r1], max_vms_per_region: 1, max_vms: 1}]
zones: {r1: [r1-a]}
capacity: {default: 1, schedule: [{at_s: 1000, zone: r1-a, capacity: 0}, {at_s: 1100, zone: r1-a, capacity: 1}]}
boot: {dist: fixed, s: 100}
delete_s: 0
prices: {r1: {spot: 3.6}}
"""


def test_compression_divides_a_csv_jobs_checkpoint_interval_as_it_does_its_run(tmp_path):
    """A 10 h job checkpointing every 10 min, compressed 10x, is a 1 h run: it checkpoints every minute, and a
    preemption 900 s in loses nothing. The interval was left at 600 s: 300 s of its run thrown away."""
    from zen_dev.sim.jobs import load_jobs

    csv = tmp_path / "jobs.csv"
    csv.write_text("job_id,submit_s,duration_s,cluster,regions,priority,checkpoint_every_s\nj,0,36000,c,,0,600\n")
    scenario = parse_scenario(PREEMPTED_ONCE, source="t.yaml")
    [job] = load_jobs(scenario, str(csv), compression=10)
    assert (job.duration_s, job.checkpoint_every_s) == (3600, 60)
    result = Simulation(scenario, [job], make_policy("single-region"), horizon_s=8000).run()
    assert result.preemptions == 1 and result.rework_gpu_seconds == 0


# A capacity for a zone GCE has but the default zones lack -----------------------------------------------
OTHER_ZONES = """
clusters:
  - {name: c8, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [us-east1, us-central1],
     max_vms_per_region: 4, max_vms: 8}
capacity:
  default: 0
  schedule:
    - {zone: us-east1-d, at_s: 0, capacity: 3}
    - {zone: europe-west4-a, at_s: 0, capacity: 3}
jobs:
  kind: synthetic
  count: 3
  arrivals: {kind: burst, at_s: 60}
  duration: {dist: lognormal, median_s: 600, sigma: 0.1}
"""


def test_capacity_of_a_zone_beyond_a_b_c_is_a_zone_of_its_region_and_an_unused_one_is_noted(tmp_path, capsys):
    """us-east1 has zones b, c and d; with no zones: given, its MIG ran in -a, -b, -c only, and the trace of
    us-east1-d was read and never used: every job never started, without a word."""
    rc, policies, err = _cli(tmp_path, capsys, OTHER_ZONES, "--policies", "zen")
    assert rc == 0 and policies["zen"]["never_started"] == 0, policies
    assert "note: capacity given for europe-west4-a, where no cluster's MIG runs" in err


# A capacity trace file with a non-finite number ----------------------------------------------------------
ONE_TRACE = """
seed: 1
clusters:
  - {name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-west1], max_vms_per_region: 2, max_vms: 2}
zones: {us-west1: [us-west1-b]}
capacity:
  default: 0
  traces:
    - {file: us-west1-b_a100_40gb_4.json}
boot: {dist: fixed, s: 100}
jobs: {kind: synthetic, count: 3, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 600}}
"""


@pytest.mark.parametrize("trace, field", [
    ('{"metadata": {"gap_seconds": 150}, "data": [2, Infinity, 2]}', "data[1]"),  # an OverflowError traceback
    ('{"metadata": {"gap_seconds": 150}, "data": [2, NaN, 2]}', "data[1]"),  # "cannot convert float NaN to integer"
    ('{"metadata": {"gap_seconds": NaN}, "data": [2, 0, 2]}', "gap_seconds"),  # ran, exit 0
])
def test_a_non_finite_number_in_a_trace_file_is_refused_naming_it(tmp_path, capsys, trace, field):
    """Python's json reads NaN and Infinity (and writes them: a harness filling a gap with float('nan')). The
    trace reader checked a value with ``value < 0`` and the gap with ``gap <= 0``, which NaN passes: a crash
    with a traceback, or a run on a NaN gap. Each is refused now as a scenario problem at the trace's line,
    naming the field, exit 2."""
    (tmp_path / "us-west1-b_a100_40gb_4.json").write_text(trace)
    rc, policies, err = _cli(tmp_path, capsys, ONE_TRACE, "--policies", "single-region")
    assert rc == 2, f"exit {rc}: {policies or err}"
    assert field in err and "s.yaml line" in err and "finite" in err, err


# The synthetic generator's weight tables -------------------------------------------------------------------
TWO_CLUSTERS = """
seed: 1
clusters:
  - {name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-central1], max_vms_per_region: 2, max_vms: 2}
  - {name: d, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-central1], max_vms_per_region: 2, max_vms: 2}
zones: {us-central1: [us-central1-a]}
capacity: {default: 4}
jobs: {kind: synthetic, count: 5, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 600}, %s}
"""


@pytest.mark.parametrize("weights, said", [
    ("clusters: {c: 0, d: 0}", "jobs.clusters: the weight of c must be > 0 (got 0)"),  # a traceback, exit 1
    ("priorities: {0: 0}", "jobs.priorities: the weight of 0 must be > 0 (got 0)"),
    ("nodes: {1: 0, 2: 0}", "jobs.nodes: the weight of 1 must be > 0 (got 0)"),
    ("priorities: {0: 2, 10: -1}", "jobs.priorities: the weight of 10 must be > 0 (got -1)"),  # ran, exit 0
    ("clusters: {c: 2, d: -1}", "jobs.clusters: the weight of d must be > 0 (got -1)"),  # ran, exit 0
    ("nodes: {}", "jobs.nodes: lists at least one"),  # a traceback, exit 1
])
def test_a_weight_table_that_cannot_be_drawn_from_is_refused_naming_it(tmp_path, capsys, weights, said):
    """``allow`` and ``provisioning`` weights were checked > 0; ``clusters``, ``priorities`` and ``nodes`` were not:
    weights summing to 0 crashed zen simulate in random.choices (a traceback, exit 1) and a negative weight was
    taken without a word. Each weight is > 0 now, refused at the jobs section's line, naming the field."""
    rc, policies, err = _cli(tmp_path, capsys, TWO_CLUSTERS % weights, "--policies", "single-region")
    assert rc == 2, f"exit {rc}: {policies or err}"
    assert "s.yaml line 8: " + said in err, err


def test_a_job_csv_header_with_spaces_after_its_commas_reads_its_columns(tmp_path, capsys):
    """`job_id, submit_s, ...` (a spreadsheet's or a hand's): its columns were refused as missing."""
    header = ", ".join(HEADER.strip().split(",")) + "\n"
    rc, policies, err = _cli(tmp_path, capsys, SMALL, "--policies", "zen", jobs_csv=header + "j1 , 0, 600, c , ,\n")
    assert rc == 0 and policies["zen"]["never_started"] == 0 and policies["zen"]["p50_start_s"] is not None, err
