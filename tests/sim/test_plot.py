"""The simulator's plot (zen_dev.sim.plot): written by ``zen simulate --out``, with the panels it promises."""

from __future__ import annotations

import importlib.util

import pytest

from tests.sim.helpers import scenario
from zen_dev.sim.cli import main
from zen_dev.sim.jobs import load_jobs
from zen_dev.sim.runner import run_policies

# matplotlib (0.7 s to import) loaded by the tests that draw, not by every test worker's collection
pytestmark = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed")


@pytest.fixture(scope="module")
def plot():
    from zen_dev.sim import plot

    return plot


# us-central1 has no capacity for the first half hour; the other regions hold 2 VMs each.
STOCKOUT = """default: 2
  schedule:
    - {at_s: 0, zone: us-central1-a, capacity: 0}
    - {at_s: 1800, zone: us-central1-a, capacity: 2}"""
POLICIES = ["zen", "failover"]


def _run():
    sc = scenario(STOCKOUT)
    return sc, run_policies(sc, load_jobs(sc, None), POLICIES)


def test_zen_simulate_out_writes_a_non_trivial_png(tmp_path, capsys):
    assert main(["--scenario", "all-out-30min", "--policies", "zen,failover", "--out", str(tmp_path)]) == 0
    assert f"wrote {tmp_path / 'plot.png'}" in capsys.readouterr().out
    png = (tmp_path / "plot.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 50_000


def test_capacity_per_region_sums_the_zones_of_the_clusters_machine_type(plot):
    capacity_by_region = plot.capacity_by_region
    sc = scenario(STOCKOUT)
    times, per_region = capacity_by_region(sc, horizon_s=7200)
    assert times == [0.0, 1800.0]
    assert per_region == {"us-central1": [0, 2], "us-west1": [2, 2], "europe-west4": [2, 2]}
    assert capacity_by_region(scenario("default: unlimited"), 7200)[1]["us-west1"] is None


def test_figure_has_one_panel_per_policy_and_the_three_side_panels(plot):
    from matplotlib.collections import PolyCollection

    sc, results = _run()
    for result in results.values():  # what world.py records at each first start
        result.start_regions = [(s, "us-west1" if i % 3 else "europe-west4")
                                for i, (_, s) in enumerate(result.starts) if s is not None]
    fig = plot.build_figure(results, sc, title="test: a stockout")
    axes = fig.axes
    assert len(axes) == len(POLICIES) + 3
    left, right = axes[:len(POLICIES)], axes[len(POLICIES):]
    assert [ax.get_title(loc="left").split(":")[0] for ax in left] == POLICIES
    assert all("p95 start" in ax.get_title(loc="left") and "VM-min" in ax.get_title(loc="left") for ax in left)
    assert tuple(ax.get_title() for ax in right) == plot.RIGHT_TITLES
    for ax in left:
        assert sum(isinstance(c, PolyCollection) for c in ax.collections) == 3  # capacity, one band per region
        assert len(ax.lines) >= 3  # limit, VMs paid, start rug
        assert ax.get_ylabel() == "GPU VMs"
    assert left[-1].get_xlabel().startswith("simulated time (")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "VMs paid for" in legend and "region stocked out (top strip)" in legend
    assert {"capacity us-central1", "capacity us-west1", "capacity europe-west4"} <= set(legend)
    assert fig.legends[0].get_title().get_text() == "test: a stockout"
    ecdf, minutes, regions = right
    assert [t.get_text() for t in ecdf.get_legend().get_texts()] == POLICIES
    assert [t.get_text() for t in minutes.get_yticklabels()] == POLICIES
    assert len(minutes.patches) == 2 * len(POLICIES)  # paid and wasted per policy
    assert [t.get_text() for t in regions.get_legend().get_texts()] == ["us-west1", "europe-west4"]
    assert len(regions.patches) == 2 * len(POLICIES)


def test_figure_degrades_without_start_regions_or_scenario(plot):
    from matplotlib.collections import PolyCollection

    sc, results = _run()
    for result in results.values():
        result.start_regions.clear()  # as from a run that did not record them
    fig = plot.build_figure(results)  # no scenario: no capacity, no limit
    assert len(fig.axes) == len(POLICIES) + 3
    regions = fig.axes[-1]
    assert any("not recorded" in t.get_text() for t in regions.texts)
    assert not regions.patches
    assert not any(isinstance(c, PolyCollection) for c in fig.axes[0].collections)
