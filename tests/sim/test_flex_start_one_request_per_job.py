"""Flex-start-only jobs start when capacity holds some of them. Zen (production's FlexStartMig.resize, as the
simulator's port) asked for every one-node job's VM of a flex-start pool in one all-or-nothing resize request,
granted only when one zone held all of them: with room for 2 VMs per zone and 3 such jobs, none started for
hours while 2 could have run all along. Each one-node job's VM is a request of its own now
(zen.scaling.port.resize_requests)."""

from __future__ import annotations

import json

import pytest

from zen_dev.sim.cli import main

SCENARIO = """
seed: 1
horizon_s: 20000
clusters:
  - {name: c4, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-central1, us-west1],
     max_vms_per_region: 4, max_vms: 8, provisioning: [spot, flex-start]}
zones: {us-central1: [us-central1-a], us-west1: [us-west1-a]}
capacity: {default: 2}
flex_start: {grant: {dist: fixed, s: 120}}
prices:
  us-central1: {spot: 1.0, flex-start: 1.5}
  us-west1: {spot: 1.1, flex-start: 1.6}
jobs: {kind: synthetic, count: JOBS, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 600},
       provisioning: {flex-start: 1}}
"""


@pytest.mark.parametrize("policy", ["zen", "cheapest-first"])
@pytest.mark.parametrize("jobs", [2, 3])
def test_flex_start_jobs_start_when_capacity_holds_some_of_them(tmp_path, capsys, policy, jobs):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("JOBS", str(jobs)))
    rc = main(["--scenario", str(path), "--json", "--policies", policy])
    out, err = capsys.readouterr()
    assert rc == 0, err
    result = json.loads(out)["policies"][policy]
    # Each zone holds 2 VMs for the whole run: at least 2 jobs can start within minutes, and all of them in time.
    assert result["never_started"] == 0 and result["p50_start_s"] < 1800, (
        f"{jobs} flex-start jobs, zones holding 2 VMs each: never_started {result['never_started']}, "
        f"p50 start {result['p50_start_s']} s, peak VMs {result['peak_vms']} over 20000 s")
