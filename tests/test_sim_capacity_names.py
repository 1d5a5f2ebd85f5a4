"""A scenario whose capacity names no zone and machine type any cluster runs is refused, naming the fields: it
changed nothing, every zone had the default capacity (unlimited unless set), and a replayed stockout became no
stockout, every policy measured against a cloud that never runs out (a machine type's typo without a word, a zone's
with a note on stderr, exit 0; through the Python API outside harnesses use, nothing). Capacity also given for
zones no cluster runs in, beside some that apply (a trace of every zone of a region, say), is still only noted.
"""

from __future__ import annotations

import pytest

from zen.cli.main import main
from zen_dev.capacity.yamllines import ScenarioError
from zen_dev.sim.scenario import parse_scenario

SCENARIO = """seed: 1
horizon_s: 5000
clusters:
  - {name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [r1], max_vms_per_region: 2, max_vms: 2}
zones: {r1: [r1-a]}
capacity:
  schedule: [%s]
boot: {dist: fixed, s: 100}
prices: {r1: {spot: 3.6}}
jobs: {kind: synthetic, count: 1, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 1000}}
"""

TYPOS = [
    ("{at_s: 0, zone: r1-a, machine_type: a2-highgpu-4G, capacity: 0}", "machine_type"),  # upper-case G
    ("{at_s: 0, zone: r1-A, capacity: 0}", "zone"),  # upper-case A
    ("{at_s: 0, zone: us-r1-a, capacity: 0}", "zone"),
]


@pytest.mark.parametrize("step, field", TYPOS)
def test_capacity_for_an_unknown_zone_or_machine_type_is_refused_by_the_api(step, field):
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(SCENARIO % step, source="s.yaml")
    assert "capacity: none of its steps or traces is for a zone and machine type a cluster runs" in str(refused.value)
    assert "check their zone and machine_type (the clusters' zones: r1-a; machine types: a2-highgpu-4g)" in str(
        refused.value)


def test_capacity_for_other_zones_beside_one_that_applies_is_taken():
    scenario = parse_scenario(SCENARIO % "{at_s: 0, zone: r1-a, capacity: 0}, {at_s: 0, zone: r9-a, capacity: 1}")
    assert scenario.unused_zones() == ["r9-a"]


@pytest.mark.parametrize("step, field", TYPOS)
def test_capacity_for_an_unknown_zone_or_machine_type_is_refused_by_zen_simulate(tmp_path, capsys, step, field):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO % step)
    rc = main(["simulate", "--scenario", str(path), "--json", "--policies", "single-region"])
    out, err = capsys.readouterr()
    assert rc == 2, f"ran anyway: {out.strip()[:200]} / stderr: {err.strip()}"
    assert "check their zone and machine_type" in err
