"""A harness's price table with a price of 0 (docs/reference/simulator.md: "A price is USD per VM-hour from 0 to
1,000,000"): `zen simulate` runs it. What a cold start costs in seconds of an idle VM's price
(``zen.scaling.ranking.Ranking.cold_start_s``) divided by that price: a free pool's idle VM died mid-run with
ZeroDivisionError, exit 1."""

from __future__ import annotations

from zen.cli.main import main

SCENARIO = """seed: 1
horizon_s: 7200
clusters:
  - {name: c1, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-central1, us-west1], max_vms_per_region: 4,
     max_vms: 8, provisioning: [spot, standard]}
capacity: {default: 2}
boot: {dist: fixed, s: 60}
prices:
  us-central1: {spot: 0, standard: 2}
  us-west1: {spot: 0.0, standard: 2}
jobs: {kind: synthetic, count: 3, arrivals: {kind: burst, at_s: 0, spread_s: 0}, duration: {dist: fixed, s: 600}}
"""


def test_a_zero_price_runs(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    rc = main(["simulate", "--scenario", str(path), "--json", "--policies", "zen"])
    out, err = capsys.readouterr()
    assert rc == 0 and "ZeroDivisionError" not in err, (rc, err)
