"""Capacity given for a machine type no cluster runs in a zone, beside capacity that applies, is noted on stderr.

A harness replaying one capacity series per zone and machine type that misspells one machine type (or names a
shape none of its clusters runs there) had that series read and never used, without a word: the zone kept the
default capacity (unlimited unless set), so a replayed stockout there was no stockout. Capacity for a zone no
cluster runs in was noted; one for a zone that is run, of a machine type that is not, was not."""

from __future__ import annotations

import json

from zen_dev.sim.cli import main

SCENARIO = """
seed: 1
clusters:
  - {name: c8, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [us-central1, us-west1],
     max_vms_per_region: 2, max_vms: 4, provisioning: [spot]}
zones: {us-central1: [us-central1-a], us-west1: [us-west1-a]}
capacity:
  schedule:
    - {at_s: 0, zone: us-central1-a, machine_type: a2-highgpu-8g, capacity: 1}
    - {at_s: 0, zone: us-west1-a, machine_type: %s, capacity: 0}
boot: {dist: fixed, s: 60}
prices: {us-central1: {spot: 2}, us-west1: {spot: 2}}
jobs: {kind: synthetic, count: 1, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 60}}
"""


def _run(tmp_path, capsys, machine_type: str):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO % machine_type)
    rc = main(["--scenario", str(path), "--json", "--policies", "single-region"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert json.loads(out)["policies"]["single-region"]["never_started"] == 0
    return err


def test_capacity_of_a_machine_type_no_cluster_runs_in_its_zone_is_noted(tmp_path, capsys):
    err = _run(tmp_path, capsys, "a2-highgpu-8G")  # upper-case G
    assert "note: capacity given for a2-highgpu-8G in us-west1-a, a machine type no cluster runs there" in err, err


def test_capacity_of_the_machine_types_clusters_run_is_not_noted(tmp_path, capsys):
    err = _run(tmp_path, capsys, "a2-highgpu-8g")
    assert "note: capacity given" not in err, err
