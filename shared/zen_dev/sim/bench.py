"""``make bench``: every policy on the fixed scenarios and on held-out capacity traces; zen's ratios to
ask-every-region with the issue's targets, and whether each holds; then the 30-day replay, the
replay times, data locality, the two-tenant flood and gangs. It reports and does not fail on a missed
target (exit 0 unless something breaks); scenarios whose traces are absent are skipped.
What it runs, the targets and the figures: docs/benchmarks/simulator.md
"""

from __future__ import annotations

import sys
import time

from zen_dev.sim import dollars, fairness, gangbench
from zen_dev.sim.heldout import HELDOUT_SEEDS, heldout_scenario
from zen_dev.sim.jobs import load_jobs
from zen_dev.sim.metrics import RunResult, ratio, shown
from zen_dev.sim.policies import POLICY_NAMES
from zen_dev.sim.report import format_table
from zen_dev.sim.runner import run_policies
from zen_dev.sim.scenario import Scenario, TraceUnavailable, load_scenario

SCENARIOS = ("region-out", "rolling-stockouts", "all-out-30min", "gcp-a100-trace", "burst-200")
LONG_SCENARIO = "gcp-a100-30d"  # its replay time is a target of its own (< 20 s a policy and seed)
LONG_SEEDS = 3  # one seed's 30-day p50 ratio ranged 0.93-1.45 over seeds 16-18 (2026-11-28)
SEEDS = 5  # seeds pooled per scenario but the 30-day one
DATA_SCENARIO = "data-locality"  # reported apart: GB of input across regions (issue 15), no targets


def capacity_always_somewhere(scenario: Scenario, horizon_s: float) -> bool:
    """True when, at every moment of the run, each cluster has a zone with capacity > 0."""
    for cluster in scenario.clusters:
        keys = [(zone, cluster.machine_type) for zones in cluster.zones.values() for zone in zones]
        times, t = {0.0}, 0.0
        for key in keys:
            t = 0.0
            while (t := scenario.capacity.next_change(*key, t)) is not None and t <= horizon_s:
                times.add(t)
        for moment in times:
            if all(scenario.capacity.capacity(zone, mt, moment) <= 0 for zone, mt in keys):
                return False
    return True


TARGETS = (  # (label, metric, zen / ask-every-region must be at most)
    ("p50", "p50_start_s", 1.00),
    ("p95", "p95_start_s", 1.10),
    ("waste", "wasted_vm_minutes", 0.25),
)


def ratios_and_targets(results: dict[str, RunResult], capacity_somewhere: bool) -> tuple[list[str], dict[str, bool | None]]:
    zen, ask, unlimited = (results[n].summary() if n in results else None
                           for n in ("zen", "ask-every-region", "unlimited"))
    lines: list[str] = []
    for other_name, other in (("ask-every-region", ask), ("unlimited", unlimited)):
        if zen and other:
            lines.append(f"  zen/{other_name:<17} p50 {shown(ratio(zen['p50_start_s'], other['p50_start_s'])):>6}"
                         f"   p95 {shown(ratio(zen['p95_start_s'], other['p95_start_s'])):>6}"
                         f"   wasted {shown(ratio(zen['wasted_vm_minutes'], other['wasted_vm_minutes'])):>6}")
    targets: dict[str, bool | None] = {}
    if zen and ask:
        for label, key, limit in TARGETS:  # on the values, not a ratio: 0 waste against 0 holds
            targets[f"{label} <= {limit:.2f}x ask"] = (zen[key] is not None and ask[key] is not None
                                                       and zen[key] <= limit * ask[key])
        # Job by job (the same trace, in the same order): not merely as many left unstarted.
        targets["starts all ask starts"] = not any(
            z is None and a is not None
            for (_, z), (_, a) in zip(results["zen"].starts, results["ask-every-region"].starts))
    if zen and unlimited:
        targets["p95 <= 1.25x unlimited"] = ((zen["p95_start_s"] <= 1.25 * unlimited["p95_start_s"])
                                             if capacity_somewhere else None)
    if targets:
        lines.append("  targets: " + " | ".join(f"{name}: {_yes(ok)}" for name, ok in targets.items()))
    if zen and ask:  # not waste (zen_dev.sim.metrics): runs cut short by preemptions, run again from the start
        lines.append("  lost to preemptions (VM-min, not in waste): " + ", ".join(
            f"{n} {results[n].extras()['lost_vm_minutes']:,.0f}" for n in ("zen", "ask-every-region")))
    return lines, targets


def _yes(ok: bool | None) -> str:
    return "n/a" if ok is None else ("yes" if ok else "NO")


def summary_table(rows: list[tuple[str, dict[str, RunResult], dict[str, bool | None]]]) -> list[str]:
    """One line per scenario: each ratio zen / ask-every-region with its target and whether it holds."""
    head = (f"{'scenario':<28}" + "".join(f"{label + ' (<=' + format(limit, '.2f') + ')':>22}"
                                          for label, _, limit in TARGETS)
            + f"{'never zen/ask':>15}{'p95 vs unlimited':>18}")
    lines = [head]
    for name, results, targets in rows:
        if "zen" not in results or "ask-every-region" not in results:
            lines.append(f"{name:<28} zen or ask-every-region not available")
            continue
        zen, ask = results["zen"].summary(), results["ask-every-region"].summary()
        cells = []
        for label, key, limit in TARGETS:
            value = ratio(zen[key], ask[key])
            cells.append(f"{shown(value) + ' ' + _yes(targets.get(f'{label} <= {limit:.2f}x ask')):>22}")
        never = f"{zen['never_started']}/{ask['never_started']} {_yes(targets.get('starts all ask starts'))}"
        lines.append(f"{name:<28}" + "".join(cells) + f"{never:>15}{_yes(targets.get('p95 <= 1.25x unlimited')):>18}")
    return lines


def pooled(runs: list[RunResult]) -> RunResult:
    """Several seeds' runs of one policy as one: every job's wait (percentiles over all of them), the
    minutes and counts added up (ratios between policies are what the targets judge)."""
    out = RunResult(policy=runs[0].policy, horizon_s=runs[0].horizon_s)
    for run in runs:
        out.starts += run.starts
        for key in ("vm_seconds", "wasted_seconds", "api_calls", "limit_violations", "busy_delete_attempts",
                    "preemptions", "vms_created", "wall_s", "input_gb", "input_gb_cross_region", "lost_seconds",
                    "stopped_at_max_runtime"):
            setattr(out, key, getattr(out, key) + getattr(run, key))
        out.peak_vms = max(out.peak_vms, run.peak_vms)
    return out


def run_scenario(name: str, load=load_scenario, seeds: int = SEEDS) -> tuple[Scenario, dict[str, RunResult], float] | None:
    """Every policy on the scenario with ``seeds`` seeds (the scenario's and the next ones: boots,
    preemptions and victims drawn again, the same jobs), pooled: p95 over 400 jobs moved by ~0.1 with
    the seed alone, so one seed's verdict was a coin toss near the target."""
    try:
        scenario = load(name)
        jobs = load_jobs(scenario)  # its Philly job trace absent: skipped alike (JobTraceUnavailable)
    except TraceUnavailable as exc:
        print(f"== {name}: skipped, trace absent ({exc})\n")
        return None
    started = time.perf_counter()
    skipped: list[str] = []
    runs = [run_policies(scenario, jobs, list(POLICY_NAMES), seed=scenario.spec.seed + k, skipped=skipped)
            for k in range(seeds)]
    results = {policy: pooled([run[policy] for run in runs]) for policy in runs[0]}
    elapsed = time.perf_counter() - started
    seeded = f"seed {scenario.spec.seed}" if seeds == 1 else f"seeds {scenario.spec.seed}..{scenario.spec.seed + seeds - 1} pooled"
    print(f"== {scenario.name}: {scenario.spec.description} ({len(jobs)} jobs, {seeded})")
    if skipped:
        print(f"  (skipped: {'; '.join(dict.fromkeys(skipped))})")
    print(format_table(results))
    horizon = next(iter(results.values())).horizon_s if results else 0.0
    lines, _ = ratios_and_targets(results, capacity_always_somewhere(scenario, horizon))
    print("\n".join(lines))
    print()
    return scenario, results, elapsed


def main() -> int:
    rows: list[tuple[str, dict[str, RunResult], dict[str, bool | None]]] = []
    runs = [(name, load_scenario) for name in SCENARIOS]
    runs += [(seed, heldout_scenario) for seed in HELDOUT_SEEDS]
    runs += [(LONG_SCENARIO, load_scenario)]
    for name, load in runs:  # the 30-day replay with LONG_SEEDS seeds (its time is measured per policy)
        ran = run_scenario(name, load, seeds=LONG_SEEDS if name == LONG_SCENARIO else SEEDS)
        if ran is None:
            continue
        scenario, results, elapsed = ran
        horizon = next(iter(results.values())).horizon_s if results else 0.0
        rows.append((scenario.name + (" (held out)" if load is heldout_scenario else ""), results,
                     ratios_and_targets(results, capacity_always_somewhere(scenario, horizon))[1]))
        if name == LONG_SCENARIO:
            days = horizon / 86400
            per_policy = ", ".join(f"{n} {r.wall_s / LONG_SEEDS:.1f}s" for n, r in results.items())
            print(f"30-day replay ({days:.0f} simulated days, {len(results)} policies, {LONG_SEEDS} seeds): "
                  f"{elapsed:.1f}s total; per policy and seed: {per_policy}")
            slowest = max((r.wall_s / LONG_SEEDS for r in results.values()), default=0.0)
            print(f"  each replay under 20 s: {_yes(slowest < 20)}\n")
    if rows:
        print("== zen / ask-every-region per scenario: ratio and whether its target holds")
        print("\n".join(summary_table(rows)))
    priced = [(scenario, False) for scenario in _loadable(SCENARIOS)] + _heldout_draws()
    print("\n" + "\n".join(dollars.report(priced)))  # prices (issue 33): the fixed scenarios to tune on, the held-out draws
    print("\n" + "\n".join(dollars.report(priced, models=dollars.WITH_FLEX, rework=False)))  # flex-start listed too
    drops = [scenario for scenario, _ in priced if scenario.name in dollars.DROP_SCENARIOS]
    print("\n" + "\n".join(dollars.share_report(drops)))  # what the original's speed costs where capacity drops
    print("\n" + "\n".join(data_locality_report()))  # issue 15
    print("\n" + "\n".join(fairness.report()))  # queues (issue 14)
    print("\n" + "\n".join(gangbench.report()))  # gangs (issue 37)
    print("\n" + "\n".join(gangbench.draws_report()))
    return 0


def _loadable(names: tuple[str, ...]) -> list[Scenario]:
    """The scenarios whose traces are here (those absent were said to be skipped by ``run_scenario``)."""
    out = []
    for name in names:
        try:
            out.append(load_scenario(name))
        except TraceUnavailable:
            pass
    return out


def _heldout_draws() -> list[tuple[Scenario, bool]]:
    try:
        return [(heldout_scenario(seed), True) for seed in HELDOUT_SEEDS]
    except TraceUnavailable:
        return []


def data_locality_report(name: str = DATA_SCENARIO) -> list[str]:
    """Per policy: GB of job input read across regions on the data-locality scenario, the start times
    (zen routes data jobs' starts to their data first: ``zen.core.routing``, the scenario's ``routing``), and
    the VMs' warm-cache hits with the staging minutes they saved."""
    scenario = load_scenario(name)
    results = run_policies(scenario, load_jobs(scenario), list(POLICY_NAMES))
    lines = [f"== {name}: {scenario.spec.description}: input read across regions (GB of all input needed)"]
    for policy, result in results.items():
        extras = result.extras()
        share = extras["input_gb_cross_region"] / extras["input_gb"] if extras["input_gb"] else 0.0
        summary = result.summary()
        starts = extras["cache_hits"] + extras["cache_misses"]
        hits = f"{extras['cache_hits']}/{starts} cache hits, {extras['staging_min_saved']:g} min of staging saved"
        lines.append(f"  {policy:<17} {extras['input_gb_cross_region']:>8,.0f} of {extras['input_gb']:,.0f} GB"
                     f" ({share:.0%})   p50 start {summary['p50_start_s']} s   p95 {summary['p95_start_s']} s"
                     f"   {hits}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
