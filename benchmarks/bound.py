"""``make bench-bound``: the least waste any policy can pay, at light load, while starting jobs as fast
as ask-every-region (issue 11's speed targets), by Monte Carlo over the simulator's own physics.

Issue 11 asks for p50 <= 1.00x and p95 <= 1.10x ask-every-region's time to start *and* wasted
VM-minutes <= 0.25x its waste. This computes, for the held-out scenarios' parameters (3 regions,
lognormal boots median 90 s, sigma 0.35, a quarter of each boot unbilled before RUNNING, deletion
billed 30 s, 6-12 arrivals an hour), the least waste ratio over every mix of:

- cold starts that boot ``k`` regions at once (k = 1, 2, 3; the job takes the first usable VM) and
  cancel the others when the first one is *usable* (what a control plane learns from the agent: Zen
  today, and the original system), or 10 s after the first reaches *RUNNING* (a word sent early in
  the guest's boot, before drivers and agent: not built), or at that very instant (no control plane
  sees it: a bound on what cancelling earlier can buy);
- warm starts: a VM kept idle after its job for a keep time K, so a share ``w`` of arrivals (Poisson)
  find one and start at once. Its idle cost per job end is (1 - e^-lambda K)/lambda, the VMs not
  reused are deleted (billed 30 s). One VM serves the next arrival: optimistic for the policy (with
  several idle VMs, arrivals do not find one more often, and each idles as long).

Every assumption is made in the policy's favour (instant warm starts, no stockouts, no queueing, no
pass delay), so the figures are lower bounds on its waste ratio: if the least one printed exceeds
0.25, no policy meets the speed and waste targets together in that setting. The simulator's own
scenarios (``make bench``) add stockouts, preemptions and passes a tick apart.
Then the gang idle bound (issue 37): ``benchmarks.gang_bound``; the queue bound (issue 33's p95 against
``cheapest-first``'s, where a cluster's places bind): ``benchmarks.queue_bound``; and the dollar bound
(issue 33), an LP over the simulator's scenarios: ``benchmarks.dollar_bound``.
Run: ``make bench-bound`` (``--samples``, ``--seed``, ``--no-dollars``, ``--slot-s``).
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Physics:
    regions: int = 3
    boot_median_s: float = 90.0
    boot_sigma: float = 0.35
    unbilled_fraction: float = 0.25  # of a boot, before RUNNING (zen_dev.sim.scenario: unbilled_boot_fraction)
    delete_s: float = 30.0  # a deleted VM is billed this long


@dataclass(frozen=True)
class Cold:
    starts: list[float]  # seconds to a usable VM, per job
    loser_s: float  # mean billed seconds of the boots that lost, per job


def cold_starts(p: Physics, k: int, after_running_s: float | None, samples: int, seed: int) -> Cold:
    """Boot ``k`` regions at once; the job takes the first usable VM; the others are deleted when the
    first is usable (``after_running_s`` None), or that long after the first reaches RUNNING. Every
    ``k`` draws the same boots (common random numbers): k regions are the first k of the same draw."""
    rng = random.Random(seed)
    starts, lost = [], 0.0
    mu = math.log(p.boot_median_s)
    for _ in range(samples):
        boots = [math.exp(rng.gauss(mu, p.boot_sigma)) for _ in range(p.regions)][:k]
        running = [p.unbilled_fraction * b for b in boots]
        first = min(range(k), key=boots.__getitem__)  # first usable; with RUNNING at a share of the boot, also first RUNNING
        cancel = boots[first] if after_running_s is None else min(boots[first], running[first] + after_running_s)
        starts.append(boots[first])
        lost += sum(cancel - running[i] + p.delete_s for i in range(k) if i != first and running[i] < cancel)
    return Cold(sorted(starts), lost / samples)


def quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def mixed_quantile(cold: list[float], w: float, q: float) -> float:
    """Quantile ``q`` of start times when a share ``w`` starts at once (0 s) and the rest as ``cold``."""
    if q <= w:
        return 0.0
    return quantile(cold, (q - w) / (1.0 - w))


def least_waste(p: Physics, rate_per_hour: float, after_running_s: float | None, samples: int, seed: int
                ) -> tuple[float, str, float]:
    """(least waste ratio meeting p50 <= 1.00x and p95 <= 1.10x, the mix that gets it, ask's waste s/job)."""
    ask = cold_starts(p, p.regions, None, samples, seed)
    ask_waste = p.delete_s + ask.loser_s  # single-use: the winner is deleted after its job too
    ask_p50, ask_p95 = quantile(ask.starts, 0.50), quantile(ask.starts, 0.95)
    lam = rate_per_hour / 3600.0
    best = (math.inf, "none meets the speed targets")
    for k in range(1, p.regions + 1):
        cold = cold_starts(p, k, after_running_s, samples, seed)
        for step in range(0, 100):
            w = step / 100.0
            if mixed_quantile(cold.starts, w, 0.50) > ask_p50 or mixed_quantile(cold.starts, w, 0.95) > 1.10 * ask_p95:
                continue
            waste = w / lam + (1.0 - w) * (p.delete_s + cold.loser_s)
            if waste / ask_waste < best[0]:
                best = (waste / ask_waste, f"{k} boot(s) per cold start, {w:.0%} of arrivals warm")
            break  # more warm arrivals only cost more idle time
    return best[0], best[1], ask_waste


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bound", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--no-dollars", action="store_true",
                        help="skip issue 33's bounds (benchmarks/queue_bound.py, benchmarks/dollar_bound.py)")
    parser.add_argument("--slot-s", type=float, default=None, help="the dollar bound's time slot (default 60 s)")
    parser.add_argument("--tighter", action="store_true", help="the dollar bound also with late jobs paid where they "
                        "can run and each queue in arrival order, and for p95 <= 0.80x cheapest-first's against 0.90x its "
                        "dollars (two columns more; minutes more)")
    args = parser.parse_args(argv)
    p = Physics()
    print(f"{p.regions} regions, lognormal boots median {p.boot_median_s:.0f} s sigma {p.boot_sigma}, "
          f"{p.unbilled_fraction:.0%} of a boot unbilled, deletion billed {p.delete_s:.0f} s; "
          f"{args.samples:,} samples")
    print(f"{'arrivals/h':>10}  {'losers deleted when the first VM is':<38} {'least waste':>11}  mix")
    for rate in (6, 12, 30):
        for after_running_s, when in ((None, "usable (its agent says so: Zen today)"),
                                      (10.0, "RUNNING + 10 s (an early word)"),
                                      (0.0, "RUNNING, at that instant")):
            ratio, mix, ask_waste = least_waste(p, rate, after_running_s, args.samples, args.seed)
            print(f"{rate:>10}  {when:<38} {ratio:>10.2f}x  {mix} (ask-every-region: {ask_waste:.0f} s/job)")
    from benchmarks import gang_bound  # issue 37: idle node-time waiting for a gang's last node

    print("\n" + "\n".join(gang_bound.report(gang_bound.GANGS_MIX, gang_bound.GANGS_MIX_RATE, Physics(boot_sigma=0.3),
                                              args.samples, args.seed)))
    if not args.no_dollars:  # issue 33: the earliest starts where places bind, then the least x floor
        from benchmarks import queue_bound
        from benchmarks.dollar_report import SLOT_S, report

        print("\n" + "\n".join(queue_bound.report()))
        print("\n" + "\n".join(report(slot_s=args.slot_s or SLOT_S, tighter=args.tighter)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
