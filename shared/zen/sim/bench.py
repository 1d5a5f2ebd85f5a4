"""``make bench``: every policy on the benchmark scenarios, zen's ratios and the issue's targets.

For each scenario it prints the policies' table, the ratios zen/ask-every-region and zen/unlimited for
p50 and p95 time-to-start and wasted VM-minutes, and whether each target holds:

- zen p95 <= 1.1x ask-every-region's;
- zen p95 <= 1.25x unlimited's, where capacity exists somewhere at every moment (else "n/a");
- zen wasted VM-minutes <= 25% of ask-every-region's;
- zen p50 < ask-every-region's.

Then it replays the 30-day scenario (Philly jobs on the looped GCP A100 trace) and prints how long
each policy's replay took. Scenarios whose traces are absent are skipped with a note. Not a test:
it reports, it does not fail on a missed target (exit 0 unless something breaks).
"""

from __future__ import annotations

import sys
import time

from zen.sim.jobs import load_jobs
from zen.sim.metrics import RunResult
from zen.sim.policies import POLICY_NAMES
from zen.sim.report import format_table
from zen.sim.runner import run_policies
from zen.sim.scenario import Scenario, TraceUnavailable, load_scenario

SCENARIOS = ("region-out", "rolling-stockouts", "all-out-30min", "gcp-a100-trace", "burst-200")
LONG_SCENARIO = "gcp-a100-30d"


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


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if b == 0:
        return 1.0 if a == 0 else float("inf")
    return a / b


def _r(value: float | None) -> str:
    return "-" if value is None else ("inf" if value == float("inf") else f"{value:.2f}")


def ratios_and_targets(results: dict[str, RunResult], capacity_somewhere: bool) -> tuple[list[str], dict[str, bool | None]]:
    zen, ask, unlimited = (results[n].summary() if n in results else None for n in ("zen", "ask-every-region", "unlimited"))
    lines: list[str] = []
    for other_name, other in (("ask-every-region", ask), ("unlimited", unlimited)):
        if zen and other:
            lines.append(f"  zen/{other_name:<17} p50 {_r(_ratio(zen['p50_start_s'], other['p50_start_s'])):>6}"
                         f"   p95 {_r(_ratio(zen['p95_start_s'], other['p95_start_s'])):>6}"
                         f"   wasted {_r(_ratio(zen['wasted_vm_minutes'], other['wasted_vm_minutes'])):>6}")
    targets: dict[str, bool | None] = {}
    if zen and ask:
        targets["p95 <= 1.1x ask"] = zen["p95_start_s"] <= 1.1 * ask["p95_start_s"]
        targets["wasted <= 25% ask"] = zen["wasted_vm_minutes"] <= 0.25 * ask["wasted_vm_minutes"]
        targets["p50 < ask"] = zen["p50_start_s"] < ask["p50_start_s"]
    if zen and unlimited:
        targets["p95 <= 1.25x unlimited"] = (zen["p95_start_s"] <= 1.25 * unlimited["p95_start_s"]) if capacity_somewhere else None
    if targets:
        lines.append("  targets: " + " | ".join(
            f"{name}: {'n/a' if ok is None else ('yes' if ok else 'NO')}" for name, ok in targets.items()))
    return lines, targets


def run_scenario(name: str) -> tuple[Scenario, dict[str, RunResult], float] | None:
    try:
        scenario = load_scenario(name)
    except TraceUnavailable as exc:
        print(f"== {name}: skipped, trace absent ({exc})\n")
        return None
    jobs = load_jobs(scenario)
    started = time.perf_counter()
    skipped: list[str] = []
    results = run_policies(scenario, jobs, list(POLICY_NAMES), skipped=skipped)
    elapsed = time.perf_counter() - started
    print(f"== {name}: {scenario.spec.description} ({len(jobs)} jobs, seed {scenario.spec.seed})")
    if skipped:
        print(f"  (skipped: {', '.join(skipped)}: not importable)")
    print(format_table(results))
    horizon = next(iter(results.values())).horizon_s if results else 0.0
    lines, _ = ratios_and_targets(results, capacity_always_somewhere(scenario, horizon))
    print("\n".join(lines))
    print()
    return scenario, results, elapsed


def main() -> int:
    summary: list[tuple[str, dict[str, bool | None]]] = []
    for name in SCENARIOS + (LONG_SCENARIO,):
        ran = run_scenario(name)
        if ran is None:
            continue
        scenario, results, elapsed = ran
        horizon = next(iter(results.values())).horizon_s if results else 0.0
        summary.append((name, ratios_and_targets(results, capacity_always_somewhere(scenario, horizon))[1]))
        if name == LONG_SCENARIO:
            days = horizon / 86400
            per_policy = ", ".join(f"{n} {r.wall_s:.1f}s" for n, r in results.items())
            print(f"30-day replay ({days:.0f} simulated days, {len(results)} policies): {elapsed:.1f}s total; "
                  f"per policy: {per_policy}")
            slowest = max((r.wall_s for r in results.values()), default=0.0)
            print(f"  under a minute per replay: {'yes' if slowest < 60 else 'NO'}; all policies: "
                  f"{'yes' if elapsed < 60 else 'NO'}\n")
    if summary:
        print("== targets per scenario (zen)")
        for name, targets in summary:
            cells = " | ".join(f"{k}: {'n/a' if v is None else ('yes' if v else 'NO')}" for k, v in targets.items())
            print(f"  {name:<18} {cells or 'zen not available'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
