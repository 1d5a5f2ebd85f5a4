"""A scenario's jobs that accept flex-start alone are refused, naming the field, where production refuses them
(zen.jobs.placement.check_provisioning): a start bound below the cluster's flex_start_min_wait_s, or a run longer
than a flex-start VM lives (flex_start_run_s). The simulator ran them (the synthetic ones, a CSV's), billed: an
outside harness measured jobs production never takes, and 2-hour jobs ran whole on VMs GCE deletes at 10 min."""

from __future__ import annotations

import json

from zen_dev.sim.cli import main

SCENARIO = """
seed: 1
clusters:
  - {name: c4, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-central1, us-west1],
     max_vms_per_region: 4, max_vms: 8, provisioning: [spot, flex-start], max_start_wait_s: 60}
capacity: {default: 2}
flex_start: {grant: {dist: fixed, s: 120}}
prices:
  us-central1: {spot: 1.0, flex-start: 1.5}
  us-west1: {spot: 1.1, flex-start: 1.6}
jobs: {kind: synthetic, count: 3, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 600},
       provisioning: {flex-start: 1}}
"""

JOBS_CSV = "job_id,submit_s,duration_s,cluster,regions,priority,provisioning\nj1,0,600,c4,,,flex-start\n"


def _run(tmp_path, capsys, *extra):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    rc = main(["--scenario", str(path), "--json", "--policies", "zen", *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def test_synthetic_flex_only_jobs_below_the_clusters_flex_start_min_wait_are_refused(tmp_path, capsys):
    rc, out, err = _run(tmp_path, capsys)
    ran = json.loads(out)["policies"]["zen"] if rc == 0 and out.strip() else None
    assert rc == 2, f"accepted and ran jobs production refuses (max_start_wait_s 60 < flex_start_min_wait_s 300): {ran}"
    assert "max_start_wait_s" in err, err


def test_csv_flex_only_job_below_the_clusters_flex_start_min_wait_is_refused(tmp_path, capsys):
    csv = tmp_path / "jobs.csv"
    csv.write_text(JOBS_CSV)
    rc, out, err = _run(tmp_path, capsys, "--jobs", str(csv))
    assert rc == 2, f"accepted a CSV job production refuses: {out[:300]}"
    assert "max_start_wait_s" in err, err


RUN_SHORT = """
seed: 1
clusters:
  - {name: c4, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-central1], max_vms_per_region: 4, max_vms: 4,
     provisioning: [flex-start], flex_start_run_s: 600}
capacity: {default: 2}
flex_start: {grant: {dist: fixed, s: 60}}
prices: {us-central1: {flex-start: 1.5}}
jobs: {kind: synthetic, count: 2, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 7200}}
"""


def test_jobs_outlasting_a_flex_start_vms_run_are_not_run_on_flex_start_vms_that_never_end(tmp_path, capsys):
    """flex_start_run_s 600: GCE deletes a flex-start VM after 10 minutes, and production refuses a flex-only job
    that may run longer (check_provisioning: "max_runtime_s: ... is above how long a flex-start VM ... runs").
    The simulator accepts the field, ignores it, and runs two 2-hour jobs to completion on flex-start VMs."""
    path = tmp_path / "s.yaml"
    path.write_text(RUN_SHORT)
    rc = main(["--scenario", str(path), "--json", "--policies", "zen"])
    out, err = capsys.readouterr()
    if rc == 0:
        zen = json.loads(out)["policies"]["zen"]
        raise AssertionError(f"2-hour jobs ran whole on flex-start VMs that live 600 s: never_started "
                             f"{zen['never_started']}, useful GPU-h {zen['useful_gpu_hours']} (2 x 2 h x 4 GPUs = 16)")
    assert "flex_start_run_s" in err or "max_runtime" in err, err


def test_a_refused_job_is_named_with_its_source(tmp_path, capsys):
    """A synthetic job's id (job-000000) names no file a harness wrote: the refusal says the scenario and the jobs'
    fields; a CSV job's, the CSV's path."""
    rc, _, err = _run(tmp_path, capsys)
    assert rc == 2 and err.startswith("zen: scenario s, jobs (synthetic: jobs.nodes, jobs.duration, jobs.provisioning): "
                                      "job job-000000 accepts flex-start alone"), err
    csv = tmp_path / "jobs.csv"
    csv.write_text(JOBS_CSV)
    rc, _, err = _run(tmp_path, capsys, "--jobs", str(csv))
    assert rc == 2 and f"{csv}: job j1 accepts flex-start alone" in err, err
