"""Dollars in the simulator: prices and provisioning models in the scenario, GCE's billing, the keys."""

from __future__ import annotations

import json

import pytest

from zen_dev.capacity.yamllines import ScenarioError
from zen_dev.sim.cli import main
from zen.core.prices import billed_seconds
from zen_dev.sim.jobs import SimJob
from zen_dev.sim.metrics import DOLLAR_KEYS, JSON_KEYS, USD_PARTS
from zen_dev.sim.policies import make_policy
from zen_dev.sim.scenario import builtin_names, load_scenario, parse_scenario
from zen_dev.sim.world import Simulation
from tests.sim.test_harness_inputs import PREEMPTED_ONCE

CLUSTER = "clusters: [{name: c, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [r1, r2], " \
          "max_vms_per_region: 1, max_vms: 1%s}]\n"


def _scenario(prices: str = "", provisioning: str = "", extra: str = ""):
    text = (CLUSTER % provisioning) + "zones: {r1: [r1-a], r2: [r2-a]}\ncapacity: {default: 1}\n" \
        "boot: {dist: fixed, s: 100}\nunbilled_boot_fraction: 0.25\ndelete_s: 0\n" + prices + extra
    return parse_scenario(text, source="t.yaml", name="t")


PRICES = "prices: {r1: {spot: 3.6, standard: 9.0}, r2: {spot: 1.8, standard: 7.2}}\n"


def test_gce_billing_minimum_minute_then_per_second():
    assert billed_seconds(0) == 0
    assert billed_seconds(1) == 60
    assert billed_seconds(59.5) == 60
    assert billed_seconds(60) == 60
    assert billed_seconds(90.2) == 91


def _run(scenario, jobs, horizon_s):
    return Simulation(scenario, jobs, make_policy("single-region"), horizon_s=horizon_s).run()


def test_a_job_is_billed_from_running_at_its_regions_spot_price():
    # One 4-GPU VM in r1: capacity at 0 s, RUNNING at 25 s (a quarter of the 100 s boot), usable at
    # 100 s, the job runs 3600 s, idle 300 s, deleted at the 4020 s tick: 3995 s at $3.6/h.
    result = _run(_scenario(PRICES), [SimJob("j", "c", 0.0, 3600.0, ("r1",))], 10_000)
    assert result.priced
    assert result.vm_seconds == pytest.approx(3995)
    assert result.usd == pytest.approx(3995 * 3.6 / 3600)
    assert result.useful_gpu_seconds == pytest.approx(3600 * 4)
    assert result.rework_gpu_seconds == 0
    dollars = result.dollars()
    assert dollars["usd_per_useful_gpu_hour"] == pytest.approx(3.995 / 4, abs=1e-4)
    # The floor: the cheapest listed price among the cluster's regions and models (r2 spot, $1.8/h).
    assert dollars["floor_usd_per_useful_gpu_hour"] == pytest.approx(1.8 / 4)
    assert dollars["usd_vs_floor"] == pytest.approx(3995 * 3.6 / (3600 * 1.8), abs=1e-3)
    # Split by what it bought: 75 s of billed boot, the run, 320 s idle; the run at r1's price is
    # $1.80 above the floor's (the same GPU-hours at r2's spot price).
    assert (result.usd_boot, result.usd_useful, result.usd_idle) == pytest.approx((0.075, 3.6, 0.32))
    assert result.usd_rework == result.usd_unused_vms == 0
    assert dollars["usd_above_floor"] == pytest.approx(1.8)


def test_a_short_run_pays_the_one_minute_minimum():
    # A 200 s boot (RUNNING at 50 s) and a run that ends at 80 s, before the VM was usable: 30 s of
    # RUNNING, billed as a minute.
    text = (CLUSTER % "") + "zones: {r1: [r1-a], r2: [r2-a]}\ncapacity: {default: 1}\n" \
        "boot: {dist: fixed, s: 200}\ndelete_s: 0\n" + PRICES
    result = _run(parse_scenario(text), [SimJob("j", "c", 0.0, 10.0, ("r1",))], 80)
    assert result.vm_seconds == pytest.approx(30)
    assert result.usd == pytest.approx(60 * 3.6 / 3600)
    assert result.usd_unused_vms == result.usd  # it never ran its job


def test_provisioning_picks_the_model_billed():
    result = _run(_scenario(PRICES, provisioning=", provisioning: [standard, spot]"),
                  [SimJob("j", "c", 0.0, 3600.0, ("r1",))], 10_000)
    assert result.usd == pytest.approx(3995 * 9.0 / 3600)
    assert result.dollars()["floor_usd_per_useful_gpu_hour"] == pytest.approx(1.8 / 4)


def test_a_preempted_run_is_rework_not_useful():
    # r1's only zone loses its capacity at 1000 s: the spot VM is taken back 900 s into its job.
    text = (CLUSTER % "") + "zones: {r1: [r1-a], r2: [r2-a]}\n" \
        "capacity: {default: 1, schedule: [{at_s: 1000, zone: r1-a, capacity: 0}]}\n" \
        "boot: {dist: fixed, s: 100}\ndelete_s: 0\n" + PRICES
    result = _run(parse_scenario(text), [SimJob("j", "c", 0.0, 3600.0, ("r1",))], 2_000)
    assert result.preemptions == 1
    assert result.rework_gpu_seconds == pytest.approx(900 * 4)  # ran 100 s to 1000 s
    assert result.useful_gpu_seconds == 0
    assert result.usd == pytest.approx((975 + 30) * 3.6 / 3600)  # and its 30 s stop (preemption.stop_s), as GCE bills
    assert (result.usd_rework, result.usd_boot, result.usd_useful) == pytest.approx((0.9, 0.075, 0))
    assert result.usd_idle == pytest.approx(0.03)  # the stop bought nothing


@pytest.mark.parametrize("policy", ["ask-every-region", "cheapest-first", "zen"])
def test_a_run_that_ends_as_its_zones_capacity_drops_is_done_not_rework(policy):
    """A 900 s job on a VM usable at 100 s ends at 1,000 s, the instant its zone drops to nothing: the drop was
    handled first, so its whole run counted as rework, was billed as thrown away and ran again."""
    scenario = parse_scenario(PREEMPTED_ONCE, source="tie.yaml")  # r1-a drops to nothing at 1,000 s
    result = Simulation(scenario, [SimJob("j", "c", 0.0, 900.0, ("r1",))], make_policy(policy), horizon_s=5000).run()
    assert (result.rework_gpu_seconds, result.useful_gpu_seconds) == (0, 900 * 4)


@pytest.mark.parametrize("prices, provisioning, message", [
    ("prices: {r1: {spott: 1.0}, r2: {spot: 1.0}}\n", "", "prices.r1: unknown model 'spott'"),
    ("prices: {r1: {spot: 1.0}}\n", "", "prices: no price for region r2 (cluster c)"),
    (PRICES, ", provisioning: [flex-start]", "prices.r1: none of the models cluster c's provisioning lists"),
    ("", ", provisioning: [preemptible]", "provisioning: unknown provisioning model 'preemptible'"),
    ("prices: {r1: {spot: -1}, r2: {spot: 1}}\n", "", "prices.r1.spot: a price is USD per VM-hour"),
])
def test_bad_prices_and_models_are_refused_naming_the_field(prices, provisioning, message):
    with pytest.raises(ScenarioError, match=message.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")):
        _scenario(prices, provisioning)


def test_a_refusal_names_its_field_once_at_its_line():
    text = ("clusters: [{name: c, gpu_count: 1, machine_type: a2-highgpu-1g, regions: [r1, r2],\n"
            "            max_vms_per_region: 4, max_vms: 8, provisioning: [spot, standard]}]\n"
            "zones: {r1: [r1-a], r2: [r2-a]}\n"
            "prices:\n"
            "  r1: {spot: 1.0, standard: 2.0}\n"
            "  r2: {flex-start: 1.0}\n")
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(text, source="t.yaml")
    assert str(refused.value) == ("t.yaml line 6: prices.r2: none of the models cluster c's provisioning lists "
                                  "(spot, standard) is priced here: the cluster could run no VM there")
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(text.replace("[spot, standard]", "[spot, reserved]"), source="t.yaml")
    assert str(refused.value).startswith("t.yaml line 2: clusters[0].provisioning: unknown provisioning model")


def test_default_model_is_spot_for_spot_vms_else_the_first_priced():
    assert load_scenario("region-out").clusters[0].models == ("spot",)
    standard_first = _scenario("prices: {r1: {standard: 2, spot: 1}, r2: {standard: 2, spot: 1}}\n",
                               extra="preempt_on_capacity_drop: false\n")
    assert standard_first.clusters[0].models == ("standard",)
    assert {k: p.usd_per_hour for k, p in standard_first.clusters[0].pools().items()} == {"r1": 2, "r2": 2}
    assert _scenario("prices: {r1: {standard: 2}, r2: {standard: 3}}\n").clusters[0].models == ("standard",)


def test_todays_scenarios_load_unchanged_and_report_no_dollars(capsys):
    for name in builtin_names():
        if name != "region-out-priced":
            try:
                scenario = load_scenario(name)
            except ScenarioError:
                continue  # a trace it needs is absent here
            assert not scenario.spec.priced and all(c.table is None for c in scenario.clusters)
    assert main(["--scenario", "all-out-30min", "--policies", "failover", "--json"]) == 0
    assert tuple(json.loads(capsys.readouterr().out)["policies"]["failover"]) == JSON_KEYS


def test_json_has_the_dollar_keys_beside_todays_with_prices(capsys):
    assert main(["--scenario", "region-out-priced", "--policies", "zen,ask-every-region", "--json"]) == 0
    policies = json.loads(capsys.readouterr().out)["policies"]
    for summary in policies.values():
        assert tuple(summary) == JSON_KEYS + DOLLAR_KEYS
        assert sum(summary[k] for k in USD_PARTS) == pytest.approx(summary["usd"], abs=0.05)
        assert summary["usd_above_floor"] >= 0
        assert summary["usd"] > 0 and summary["usd_vs_floor"] >= 1.0


def test_the_bench_prices_a_scenario_with_flex_start_listed_too():
    """``make bench``'s second dollar table: every cluster lists flex-start too, its floor the cheapest of
    the three models, and the table says which models it priced (no rework pass)."""
    from zen_dev.sim import dollars

    base = _scenario(extra="jobs: {kind: synthetic, count: 3, arrivals: {kind: poisson, rate_per_hour: 6}, "
                           "duration: {dist: fixed, s: 600}}\n")
    two, three = dollars.priced(base, 1), dollars.priced(base, 1, dollars.WITH_FLEX)
    table = three.clusters[0].table
    assert three.clusters[0].models == dollars.WITH_FLEX and two.clusters[0].models == dollars.MODELS
    assert three.clusters[0].floor_usd_per_vm_hour == min(table[r][m] for r in ("r1", "r2") for m in dollars.WITH_FLEX)
    lines = dollars.report([(base, False)], seeds=1, models=dollars.WITH_FLEX, rework=False)
    assert "spot+standard+flex-start" in lines[0] and not any("rework" in line for line in lines)
    assert sum(line.startswith("t @prices") for line in lines) == len(dollars.TUNING_PRICE_SEEDS)
    for policy in ("zen", "cheapest-first"):  # where each one's dollars above the floor went
        assert sum(line.strip().startswith(f"{policy} over the floor: pools +") for line in lines) == 2


def test_the_bench_gives_zen_a_share_of_standard_only_jobs_and_every_job_on_standard_costs_the_most():
    """``make bench``'s last dollar table: per price table, zen's x floor and starts against the original's
    with each share of the jobs accepting standard VMs only."""
    from zen_dev.sim import dollars

    base = _scenario(extra="jobs: {kind: synthetic, count: 12, arrivals: {kind: poisson, rate_per_hour: 6}, "
                           "duration: {dist: fixed, s: 1200}}\n")
    lines = dollars.share_report([base], seeds=1)
    rows = [line for line in lines if line.startswith("t @prices")]
    assert len(rows) == len(dollars.TUNING_PRICE_SEEDS)
    for row in rows:
        cells = row.split("/4)")[:-1]
        assert len(cells) == len(dollars.STANDARD_SHARES)
        x_floor = [float(cell.split("(")[0].split("/")[0].split()[-1]) for cell in cells]
        assert x_floor[-1] > x_floor[0] >= 1.0  # every job on standard VMs: the dearest pools
