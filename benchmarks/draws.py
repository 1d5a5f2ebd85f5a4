"""Issue 33's dollar targets on draws of the held-out generator that ``make bench`` never runs, each with its
own price table: how often each target holds beyond the bench's three held-out draws, and what a planner
knob trades for what there.

    python -m benchmarks.draws 700-739                       # zen as configured
    python -m benchmarks.draws 700-719 --timing '{"cost_slack_s": 60}'   # a knob's trade

Draw ``d`` is ``zen_dev.sim.heldout.heldout_scenario(d)`` priced by ``zen_dev.sim.dollars.price_table`` seed
``d + 1000`` (spot and standard, 2 seeds pooled, as the bench's dollar section). Per draw: each target's ratio
and whether it holds (+/-), and where zen's dollars above the floor went; then how many draws each target
holds on, and each ratio's median. ``--timing`` overrides zen's ``Timing`` fields (zen's alone: the baselines
run as configured). Figures: docs/benchmarks/simulator.md#draws-the-bench-never-runs
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace

from zen_dev.sim import dollars
from zen_dev.sim.heldout import heldout_scenario
from zen_dev.sim.jobs import load_jobs
from zen_dev.sim.runner import run_policies

BASELINES = ["ask-every-region-standard", "cheapest-first"]


def draw_range(text: str) -> list[int]:
    """``700-739`` or ``705``."""
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def measure(draw: int, timing: dict[str, float]) -> dict[str, tuple[float | None, bool | None]]:
    """One draw's target verdicts (``dollars.verdicts``), and prints its line."""
    scenario = dollars.priced(heldout_scenario(draw), draw + 1000)
    jobs = load_jobs(scenario)
    tuned = replace(scenario, spec=scenario.spec.model_copy(update={"timing": {**scenario.spec.timing, **timing}}))
    runs = [(run_policies(tuned, jobs, ["zen"], seed=scenario.spec.seed + k)
             | run_policies(scenario, jobs, BASELINES, seed=scenario.spec.seed + k)) for k in range(dollars.SEEDS)]
    results = {policy: dollars.pooled([run[policy] for run in runs]) for policy in runs[0]}
    verdict = dollars.verdicts(results)
    cells = " ".join(f"{'-' if x is None else f'{x:.2f}'}{'+' if ok else '-'}" for x, ok in verdict.values())
    print(f"draw {draw}: {cells} | zen {dollars.above_floor(results['zen'])}", flush=True)
    return verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.draws", description=__doc__.split("\n\n")[0])
    parser.add_argument("draws", type=draw_range, help="draws of the held-out generator, e.g. 700-739")
    parser.add_argument("--timing", type=json.loads, default={}, help="zen's Timing overrides, as JSON")
    args = parser.parse_args(argv)
    print("targets: " + ", ".join(label for label, _ in dollars.TARGETS))
    verdicts = [measure(draw, args.timing) for draw in args.draws]
    for label, _ in dollars.TARGETS:
        ratios = [v[label][0] for v in verdicts if v.get(label, (None, None))[0] is not None]
        held = sum(1 for v in verdicts if v.get(label, (None, None))[1])
        median = f"{statistics.median(ratios):.3f}" if ratios else "-"
        print(f"  {label:<24} holds on {held:>3} of {len(verdicts)} draws; median {median}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
