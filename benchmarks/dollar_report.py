"""``make bench-bound``'s dollar table: per scenario and price table of ``make bench``'s dollar section,
``ask-every-region-standard`` and zen run with the same seeds, the speed targets from the first, and the
dollar bound of ``benchmarks.dollar_bound`` with its contrasts beside zen's measured x floor.
Figures: docs/benchmarks/bound.md#dollars
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from benchmarks.dollar_bound import NON_SPOT, SLOT_S, TARGET, Speed, allowed_starts, region_caps, solve, speed_of
from zen_dev.sim.scenario import Scenario

MAX_WINDOW_SLOTS = 64  # a longer W95 gets longer slots (a multiple of SLOT_S): each LP solves in seconds


POLICIES = ("zen", "ask-every-region-standard")
CHEAPEST_P95, CHEAPEST_USD = 0.80, 0.90  # issue 33: dollars <= 0.90x cheapest-first's with p95 <= 0.80x its


@dataclass
class Row:
    name: str
    speed: Speed
    no_speed: float
    no_capacity: float
    bound: float
    late: float  # the share of jobs late at the bound's optimum
    bound_slot: float  # with rule "slot"
    first_useful: float  # when a job's first start is its useful run's (none taken back)
    zen: float | None  # zen's measured x floor, same seeds
    seconds: float
    slot_s: float
    tighter: float | None = None  # with late jobs paid where they can run and queues in arrival order
    # The second pair of targets: the least x floor with p95 <= 0.80x cheapest-first's (the only speed row),
    # and 0.90x cheapest-first's own x floor, which it would have to be under.
    vs_cheapest: tuple[float, float] | None = None


def measure(scenario: Scenario, name: str, seeds: int, slot_s: float = SLOT_S, tighter: bool = False) -> Row:
    """The bound and its contrasts for one priced scenario, with ``seeds`` seeds of the two policies run;
    ``tighter``: also the bound with late jobs paid and queues in arrival order (a minute or more a row)."""
    from zen_dev.sim.dollars import pooled
    from zen_dev.sim.jobs import load_jobs
    from zen_dev.sim.runner import run_policies
    started = time.perf_counter()
    jobs = load_jobs(scenario)
    policies = list(POLICIES) + (["cheapest-first"] if tighter else [])
    runs = [run_policies(scenario, jobs, policies, seed=scenario.spec.seed + k) for k in range(seeds)]
    results = {policy: pooled([r[policy] for r in runs]) for policy in runs[0]}
    std = results["ask-every-region-standard"]
    speed, horizon = speed_of(std), std.horizon_s
    slot_s = slot_s * max(1, math.ceil(speed.w95_s / (MAX_WINDOW_SLOTS * slot_s)))
    zen = results["zen"].dollars()["usd_vs_floor"] if "zen" in results else None
    bound, late = solve(scenario, jobs, speed, horizon, slot_s=slot_s)
    slots = math.ceil(horizon / slot_s) + 1
    rules_differ = any(not np.array_equal(allowed_starts(caps, "ever"), allowed_starts(caps, "slot"))
                       for cluster in scenario.clusters for model in cluster.models if model in NON_SPOT
                       for caps in region_caps(scenario, cluster, model, slots, slot_s).values())
    tight = vs_cheapest = None
    if tighter:
        tight = solve(scenario, jobs, speed, horizon, slot_s=slot_s, late_paid=True, fifo=True)[0]
        cheapest = results["cheapest-first"]
        fast = speed_of(cheapest, p95_limit=CHEAPEST_P95)  # its p95 row alone (the p50 row made the same)
        fast = replace(fast, w50_s=fast.w95_s, share50=fast.share95)
        vs_cheapest = (solve(scenario, jobs, fast, horizon, slot_s=slot_s, late_paid=True, fifo=True)[0],
                       CHEAPEST_USD * cheapest.dollars()["usd_vs_floor"])
    return Row(name, speed, solve(scenario, jobs, None, horizon, slot_s=slot_s)[0],
               solve(scenario, jobs, speed, horizon, slot_s=slot_s, capacity=False, taken_back=False)[0], bound, late,
               solve(scenario, jobs, speed, horizon, slot_s=slot_s, rule="slot")[0] if rules_differ else bound,
               solve(scenario, jobs, speed, horizon, slot_s=slot_s, taken_back=False)[0],
               zen, time.perf_counter() - started, slot_s, tight, vs_cheapest)


def _tighter(row: Row) -> str:
    if row.tighter is None or row.vs_cheapest is None:
        return ""
    bound, target = row.vs_cheapest
    return f"{row.tighter:>8.2f}{f'{bound:.2f} / {target:.2f}':>13}{' out' if bound > target else ' ok':>6}"


def scenarios() -> list[tuple[Scenario, str]]:
    """What ``zen_dev.sim.dollars`` prices in ``make bench``: the tuning scenarios at each tuning price
    table, the held-out draws at the held-out one (absent traces: skipped)."""
    from zen_dev.sim.bench import SCENARIOS
    from zen_dev.sim.dollars import HELDOUT_PRICE_SEEDS, TUNING_PRICE_SEEDS, priced
    from zen_dev.sim.heldout import HELDOUT_SEEDS, heldout_scenario
    from zen_dev.sim.scenario import TraceUnavailable, load_scenario
    out = []
    for name, load, seeds, tag in ([(n, load_scenario, TUNING_PRICE_SEEDS, "") for n in SCENARIOS]
                                   + [(s, heldout_scenario, HELDOUT_PRICE_SEEDS, " (held out)") for s in HELDOUT_SEEDS]):
        try:
            base = load(name)
        except TraceUnavailable as exc:
            print(f"  {name}: skipped, trace absent ({exc})")
            continue
        out += [(priced(base, seed), f"{base.name} @{seed}{tag}") for seed in seeds]
    return out


def report(seeds: int | None = None, slot_s: float = SLOT_S, tighter: bool = False) -> list[str]:
    """The table ``make bench-bound`` prints after the speed/waste bound (``tighter``: two columns more)."""
    from zen_dev.sim.dollars import SEEDS
    seeds = seeds or SEEDS
    started = time.perf_counter()
    more = f"{'tighter':>8}{'vs cheapest-first':>19}" if tighter else ""
    lines = [f"== dollars: the least x floor any policy pays while p95 <= 1.10x and p50 <= 1.00x "
             f"ask-every-region-standard (LP relaxation, {seeds} seeds pooled)",
             f"{'scenario @ price table':<34}{'W50 s':>7}{'W95 s':>8}{'slot s':>7}{'no speed':>9}{'no cap.':>8}"
             f"{'bound':>7}{'late':>6}{'slot rule':>10}{'no takeback':>12}{more}{'zen':>6}"
             f"  target {TARGET:.2f}x"]
    for scenario, name in scenarios():
        row = measure(scenario, name, seeds, slot_s, tighter)
        verdict = ("out of reach (bound above it)" if max(row.bound, row.tighter or 0.0) > TARGET else
                   "not excluded; out of reach without takebacks" if row.first_useful > TARGET else "not excluded")
        zen = "-" if row.zen is None else f"{row.zen:.2f}"
        lines.append(f"{name[:33]:<34}{row.speed.w50_s:>7.0f}{row.speed.w95_s:>8.0f}{row.slot_s:>7.0f}{row.no_speed:>9.2f}"
                     f"{row.no_capacity:>8.2f}{row.bound:>7.2f}{row.late:>6.0%}{row.bound_slot:>10.2f}"
                     f"{row.first_useful:>12.2f}{_tighter(row)}{zen:>6}"
                     f"  {verdict} ({row.seconds:.0f} s)")
    lines.append(f"  {time.perf_counter() - started:.0f} s in all. bound: standard VMs start where a zone had "
                 "capacity before (rule ever); slot rule: only where it has some in the start slot or the one "
                 "before (no standard VM kept idle through a drop); no takeback: a job's first start is its "
                 "useful run's" + ("; tighter: late jobs paid where they can run, each queue in arrival order; "
                                   "vs cheapest-first: the same with p95 <= 0.80x its as the speed row, against "
                                   "0.90x its x floor" if tighter else "") + ". Assumptions: benchmarks/dollar_bound.py")
    return lines
