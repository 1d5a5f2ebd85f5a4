"""``zen simulate --json`` fed scenario files and job CSVs as an outside harness writes them from
docs/reference/simulator.md: read as documented, or refused naming the file, line and field."""

from __future__ import annotations

import json

from zen_dev.sim.cli import main

SPOT_SCENARIO = """
seed: 3
clusters:
  - {name: c, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [r1, r2, r3], max_vms_per_region: 4, max_vms: 10}
capacity: {default: 2}
jobs: {kind: synthetic, count: 5, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 600}}
"""
PRICES_R1_NO_SPOT = """prices:
  r1: {standard: 5.92}
  r2: {spot: 2.04, standard: 5.92}
  r3: {spot: 2.61, standard: 6.52}
"""
HEADER = "job_id,submit_s,duration_s,cluster,regions,priority\n"
CSV_SCENARIO = """
seed: 3
clusters:
  - {name: c, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [us-central1, us-west1], max_vms_per_region: 4,
     max_vms: 8}
capacity: {default: 2}
"""


def _cli(tmp_path, capsys, scenario: str, *args: str, jobs: bytes | None = None):
    path = tmp_path / "s.yaml"
    path.write_text(scenario)
    argv = ["--scenario", str(path), "--json", "--policies", "zen", *args]
    if jobs is not None:
        (tmp_path / "jobs.csv").write_bytes(jobs)
        argv += ["--jobs", str(tmp_path / "jobs.csv")]
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, (json.loads(out)["policies"] if rc == 0 and out.strip() else None), err


def test_spot_missing_in_the_first_region_is_refused_as_in_any_other(tmp_path, capsys):
    # Spot priced in r2 and r3 of a spot scenario: missing in r2 was refused, missing in r1 turned the cluster
    # into a standard-only one without a word (every policy billed standard, no preemption), exit 0.
    rc, policies, err = _cli(tmp_path, capsys, SPOT_SCENARIO + PRICES_R1_NO_SPOT)
    assert rc == 2 and "prices.r1: no spot price" in err, (rc, policies, err)


def test_a_csv_job_naming_a_region_its_cluster_lacks_is_refused(tmp_path, capsys):
    # Production refuses it at submission (zen.jobs.placement); the simulator dropped the region and ran the job.
    rc, policies, err = _cli(tmp_path, capsys, CSV_SCENARIO,
                             jobs=(HEADER + "j1,0,600,c,us-central1;asia-east1,\n").encode())
    assert rc == 2 and "line 2" in err and "asia-east1" in err, (rc, policies, err)


def test_a_job_csv_not_in_utf8_is_bad_input_naming_the_file(tmp_path, capsys):
    # A cp1252 cell (or a UTF-16 "Unicode text" export): a UnicodeDecodeError out of main, exit 1 in `zen`.
    rc, _, err = _cli(tmp_path, capsys, CSV_SCENARIO,
                      jobs=(HEADER.rstrip("\n") + ",note\nj1,0,600,c,,,caf\xe9\n").encode("cp1252"))
    assert rc == 2 and "jobs.csv" in err, err


def test_a_csv_refusal_names_the_files_line_past_a_blank_line(tmp_path, capsys):
    # The bad row is on line 4 of the file; records counted, not lines, it said line 3.
    rc, _, err = _cli(tmp_path, capsys, CSV_SCENARIO, jobs=(HEADER + "j1,0,600,c,,\n\nj2,x,600,c,,\n").encode())
    assert rc == 2 and "line 4: submit_s" in err, err


def test_a_start_bound_from_timing_is_not_blamed_on_the_cluster(tmp_path, capsys):
    scenario = CSV_SCENARIO.replace("max_vms: 8}", "max_vms: 8, provisioning: [flex-start]}") + (
        "timing: {max_start_wait_s: 60}\n")
    rc, _, err = _cli(tmp_path, capsys, scenario, jobs=(HEADER + "j1,0,600,c,,\n").encode())
    assert rc == 2 and "timing.max_start_wait_s" in err and "cluster c's max_start_wait_s" not in err, err


def test_a_cluster_without_prices_beside_one_with_them_names_its_line(tmp_path, capsys):
    scenario = """
clusters:
  - {name: a, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [r1], max_vms_per_region: 2, max_vms: 2,
     prices: {r1: {spot: 1.2}}}
  - {name: b, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [r1], max_vms_per_region: 2, max_vms: 2}
"""
    rc, _, err = _cli(tmp_path, capsys, scenario)
    assert rc == 2 and "s.yaml line 5" in err, err  # said "s.yaml: cluster b has no prices" (no line)


def test_json_numbers_stay_finite(tmp_path, capsys):
    # A finite price near the float limit overflowed the bill: Infinity and NaN in --json (not strict JSON).
    scenario = SPOT_SCENARIO.replace("s: 600", "s: 7200") + "prices: {r1: {spot: 1.0e+308}, r2: {spot: 1.0e+308}, r3: {spot: 1.0e+308}}\n"
    path = tmp_path / "s.yaml"
    path.write_text(scenario)
    rc = main(["--scenario", str(path), "--json", "--policies", "zen"])
    out, err = capsys.readouterr()
    if rc == 0:
        json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(AssertionError(f"{c} in --json")))
    else:
        assert rc == 2 and "prices" in err, err


def test_an_integer_column_written_as_a_whole_float_is_read(tmp_path, capsys):
    # pandas writes an integer column with blanks in it as floats: 1.0 is 1; 1.5 nodes are still refused.
    rc, policies, err = _cli(tmp_path, capsys, CSV_SCENARIO, jobs=(HEADER + "j1,0,600,c,,1.0\nj2,5,600,c,,\n").encode())
    assert rc == 0 and policies, err
    rc, _, err = _cli(tmp_path, capsys, CSV_SCENARIO,
                      jobs=(HEADER.rstrip("\n") + ",nodes\nj1,0,600,c,,,1.5\n").encode())
    assert rc == 2 and "nodes is an integer" in err, err
