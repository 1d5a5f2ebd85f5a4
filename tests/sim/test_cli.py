"""``zen simulate`` (zen_dev.sim.cli), scenario validation, and the job trace readers."""

from __future__ import annotations

import json

import pytest

from zen_dev.capacity.yamllines import ScenarioError
from zen_dev.sim.cli import main
from zen_dev.sim.jobs import JobTraceError, load_jobs
from zen_dev.sim.metrics import JSON_KEYS
from zen_dev.sim.scenario import TraceUnavailable, load_scenario, parse_scenario, traces_dir

from tests.sim.helpers import scenario

PHILLY = traces_dir() / "philly-jobs" / "philly_jobs_ge4gpu.csv"
GCP = traces_dir() / "gcp-a100-availability"


def test_json_output_has_exactly_the_documented_keys(capsys):
    assert main(["--scenario", "all-out-30min", "--policies", "unlimited,failover", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["policies"]
    assert set(out["policies"]) == {"unlimited", "failover"}
    for summary in out["policies"].values():
        assert tuple(summary) == JSON_KEYS


def test_table_and_reports(tmp_path, capsys):
    assert main(["--scenario", "burst-200", "--policies", "unlimited,single-region", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "unlimited" in out and "p95 s" in out
    for name in ("summary.csv", "report.json", "starts.csv", "vms.csv"):
        assert (tmp_path / name).stat().st_size > 0
    assert "plot.png" in out  # written, or a message saying why not
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["policies"]["unlimited"]["jobs"] == 200
    assert report["seed"] == 14 and "seed 14" in out  # the scenario's, as the table says (it was null)


def test_bad_scenario_is_rejected_with_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters:\n  - {name: x, gpu_count: 4, regions: [us-central1],\n"
                   "     max_vms_per_region: -1, max_vms: 4}\nboot: {dist: fixed, s: 60}\n")
    assert main(["--scenario", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml line 3" in err and "max_vms_per_region must be >= 0" in err
    with pytest.raises(ScenarioError, match="unknown field 'capacityy'"):
        parse_scenario("clusters: [{name: x, gpu_count: 4, regions: [r1], max_vms_per_region: 1, max_vms: 1}]\n"
                       "capacityy: {}\n")
    with pytest.raises(ScenarioError, match="unknown timing field"):
        parse_scenario("clusters: [{name: x, gpu_count: 4, regions: [r1], max_vms_per_region: 1, max_vms: 1}]\n"
                       "timing: {idle_timeout: 5}\n")


def test_unknown_policy_and_bad_jobs_are_rejected(tmp_path, capsys):
    assert main(["--policies", "nope"]) == 2
    assert "unknown policy nope" in capsys.readouterr().err
    assert main(["--policies", "oracle"]) == 2
    assert "oracle is now called unlimited" in capsys.readouterr().err
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,submit_s,duration_s,cluster,regions,priority\na,0,60,nosuch,,\n")
    assert main(["--scenario", "burst-200", "--jobs", str(jobs)]) == 2
    assert "unknown cluster 'nosuch'" in capsys.readouterr().err


def test_zen_job_csv_keeps_cluster_preference_order(tmp_path):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,submit_s,duration_s,cluster,regions,priority\n"
                    "b,10,60,4xa100,europe-west4;us-central1,5\na,0,120,4xa100,,\n")
    loaded = load_jobs(scenario(), str(jobs))
    assert [j.job_id for j in loaded] == ["a", "b"]
    assert loaded[1].regions == ("us-central1", "europe-west4") and loaded[1].priority == 5
    jobs.write_text("job_id,submit_s,duration_s,cluster,regions\na,0,60,4xa100,asia-east1\n")
    with pytest.raises(JobTraceError, match="not regions of 4xa100"):
        load_jobs(scenario(), str(jobs))


@pytest.mark.skipif(not PHILLY.exists(), reason="Philly trace absent")
def test_philly_trace_loads_compressed_and_mapped_to_clusters():
    sc = load_scenario("region-out")
    jobs = load_jobs(sc, "philly", compression=10, max_jobs=200)
    assert len(jobs) == 200
    assert jobs[0].submit_s == 0 and all(a.submit_s <= b.submit_s for a, b in zip(jobs, jobs[1:]))
    assert {j.cluster for j in jobs} <= {"4xa100", "8xa100"}
    assert min(j.duration_s for j in jobs) >= 60  # >= 10 min of trace, compressed 10x


@pytest.mark.skipif(not GCP.exists(), reason="GCP A100 trace absent")
def test_gcp_trace_replay_scenario_loads_and_skips_cleanly_without_traces(monkeypatch, capsys):
    sc = load_scenario("gcp-a100-trace")
    assert sc.capacity.capacity("us-east1-b", "a2-highgpu-8g", 1000) == 0
    assert sc.capacity.capacity("europe-west4-a", "a2-highgpu-8g", 1000) >= 4
    monkeypatch.setenv("ZEN_TRACES_DIR", "/nonexistent-traces")
    with pytest.raises(TraceUnavailable):
        load_scenario("gcp-a100-trace")
    assert main(["--scenario", "gcp-a100-trace"]) == 3
    assert "absent" in capsys.readouterr().err


TIMED = """
seed: 1
clusters:
  - {name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-central1, us-west1], max_vms_per_region: 2,
     max_vms: 4}
zones: {us-central1: [us-central1-a], us-west1: [us-west1-a]}
capacity: {default: 4}
jobs: {kind: synthetic, count: 5, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 600}}
timing: {%s}
"""


@pytest.mark.parametrize("field, value, said", [
    ("idle_timeout_s", -300, "must be >= 0 (got -300), as deadlines.idle_timeout_s"),
    ("boot_timeout_s", -1, "must be > 0 (got -1), as deadlines.boot_timeout_s"),
    ("spill_after_s", -5, "must be > 0 (got -5), as scaling.spill_after_s"),
    ("block_s", 0, "must be > 0 (got 0), as scaling.stockout_block_s"),
    ("hedge_price_ratio", 0.5, "must be >= 1 (got 0.5), as scaling.hedge_price_ratio"),
    ("max_start_wait_s", -1, "must be >= 0 (got -1), as a cluster's max_start_wait_s"),
    ("agent_silence_s", 0, "must be > 0 (got 0)"),
])
def test_a_timing_outside_its_configuration_bounds_is_refused_naming_the_field(tmp_path, capsys, field, value, said):
    """A scenario's ``timing:`` was checked for unknown names only: ``idle_timeout_s: -300`` (every idle VM
    deleted at once) or ``boot_timeout_s: -1`` (every boot stuck at once) ran, exit 0, and was reported as the
    policies' figures, though production never builds such a Timing (each field comes from a bounded
    configuration field). Each is held to its configuration field's bounds now, refused at its line."""
    (tmp_path / "s.yaml").write_text(TIMED % f"{field}: {value}")
    rc = main(["--scenario", str(tmp_path / "s.yaml"), "--policies", "zen,failover", "--json"])
    out, err = capsys.readouterr()
    assert rc == 2, f"exit {rc}: {out or err}"
    assert f"s.yaml line 9: timing.{field}: {said}" in err, err


def test_every_timing_field_has_the_configuration_field_it_is_checked_against():
    from zen.scaling.model import Timing
    from zen_dev.sim.timing import SOURCES
    assert set(SOURCES) | {"agent_silence_s"} == set(Timing.__dataclass_fields__)
    assert all(field in model.model_fields for model, field, _ in SOURCES.values())
    parse_scenario("clusters: [{name: x, gpu_count: 4, regions: [r1], max_vms_per_region: 1, max_vms: 1}]\n"
                   "timing: {idle_timeout_s: 0, max_start_wait_s: 90.5, hedge_risk: 0.3, spare_boots: false}\n")


PHILLY_HEADER = "jobid,submitted_time,first_start_time,last_end_time,num_gpus,runtime_min,n_attempts,queue_delay_s\n"


@pytest.mark.parametrize("row, said", [
    ("b,2017-10-03 10:05:00,,,8,-30,1,0\n", "runtime_min is minutes >= 0 (got -30)"),
    ("b,2017-10-03 10:05:00,,,0,30,1,0\n", "num_gpus is an integer >= 1 (got 0)"),
    ("b,2017-10-03 10:05:00,,,-8,30,1,0\n", "num_gpus is an integer >= 1 (got -8)"),
])
@pytest.mark.parametrize("gangs", [False, True])
def test_a_philly_row_that_cannot_be_a_job_is_refused_naming_line_and_column(tmp_path, row, said, gangs):
    """Zen's CSV refused a negative duration_s naming the line and column, while a Philly-format file read a
    runtime_min of -30 as a job of 1 s and a num_gpus of 0 or -8 as a job of the smallest cluster (with gangs,
    a gang of 0 nodes), without a word. Such a row is refused now as the CSV's is."""
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY_HEADER + "a,2017-10-03 10:00:00,,,8,30,1,0\n" + row)
    sc = parse_scenario("clusters: [{name: c8, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [r1], "
                        f"max_vms_per_region: 4, max_vms: 4}}]\njobs: {{kind: philly, file: {path}, gangs: {gangs}}}\n")
    with pytest.raises(JobTraceError) as refused:
        jobs = load_jobs(sc, None if gangs else str(path))  # the scenario's kind: philly, or a file to --jobs
        pytest.fail(f"accepted: {[(j.job_id, j.duration_s, j.nodes) for j in jobs]}")
    assert f"{path} line 3: {said}" in str(refused.value)


PHILLY_SCENARIO = """
clusters:
  - {name: c8, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [us-central1], max_vms_per_region: 4, max_vms: 4}
capacity: {default: 4}
jobs: {kind: philly, max_jobs: 20}
"""


@pytest.mark.parametrize("jobs_section, args", [
    ("jobs: {kind: philly, max_jobs: 20}\n", ()),  # the scenario's kind: philly
    ("", ("--jobs", "philly")),
])
def test_an_absent_philly_trace_exits_3_as_an_absent_capacity_trace_does(tmp_path, capsys, monkeypatch,
                                                                         jobs_section, args):
    """zen simulate exits 3 when a trace it needs is absent, so a harness can skip (as make bench skips). With
    the shared traces absent, a scenario of kind: philly, or --jobs philly, exited 2 (bad input: "cannot read
    job trace"); it exits 3 now. A file of the user's own given to --jobs that cannot be read is still exit 2."""
    monkeypatch.setenv("ZEN_TRACES_DIR", str(tmp_path / "no-traces"))
    (tmp_path / "s.yaml").write_text(PHILLY_SCENARIO.replace("jobs: {kind: philly, max_jobs: 20}\n", jobs_section))
    rc = main(["--scenario", str(tmp_path / "s.yaml"), *args, "--policies", "single-region", "--json"])
    err = capsys.readouterr().err
    assert rc == 3 and "absent" in err and "philly_jobs_ge4gpu.csv" in err, f"exit {rc}: {err}"
    rc = main(["--scenario", str(tmp_path / "s.yaml"), "--jobs", str(tmp_path / "mine.csv"), "--policies",
               "single-region", "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot read job trace" in err and "mine.csv" in err, f"exit {rc}: {err}"
