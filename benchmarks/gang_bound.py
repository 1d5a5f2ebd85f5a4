"""``make bench-bound``'s gang section: the least idle node-time a gang's nodes can spend waiting for its
last node when its VMs are booted for it, against ask-every-region's, by Monte Carlo over the simulator's
boot physics (issue 37's idle target: <= 0.25x ask-every-region's).

Assembly is claim-as-you-come (``zen.core.gang``): each VM takes a part as soon as it is usable and the
gang starts at its N-th, so the parts that run it wait ``sum(S - b_i)`` over its first N boots (S: the
N-th). A policy may boot ``k`` spares with the gang in the same region (it starts at the N-th of N + k);
spares that lose are deleted when the gang starts and are billed as GCE bills: from RUNNING (a share of
the boot in), a one-minute minimum, deletion ``delete_s`` on top. Ask-every-region boots N in every
region; the first region to hold N runs the gang and every part claimed elsewhere waited until then
(given back); its other boots are billed likewise.

In the policy's favour: no stockouts and no queueing (ask-every-region's losing regions would claim
fewer parts), no VM already idle when the gang comes (a warm VM claims at once and waits the boots: more
idle). A gang that finds all N VMs idle waits nothing, but N VMs kept idle for it between gang arrivals
(``rate_per_hour``) cost about N / rate of idle VM-time per gang, printed beside the rest.
Run: ``make bench-bound`` (``python -m benchmarks.gang_bound`` for this section alone).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from benchmarks.bound import Physics

BILLED_MIN_S = 60.0  # GCE's minimum billed time of a VM that reached RUNNING
SPARES = range(0, 9)


@dataclass(frozen=True)
class Gang:
    idle_s: float  # mean node-seconds the parts that ran (or were given back) waited, per gang
    lost_s: float  # mean billed seconds of the boots that did not run it, per gang
    paid_s: float  # mean seconds paid for beyond the run: the running parts' wait and the lost boots' bills


def _billed(running_at: float, deleted_at: float, delete_s: float) -> float:
    return max(BILLED_MIN_S, deleted_at - running_at + delete_s) if running_at < deleted_at else 0.0


def booted_for(p: Physics, nodes: int, spares: int, samples: int, seed: int) -> Gang:
    """One region boots ``nodes + spares`` VMs for the gang; it starts at the ``nodes``-th usable one."""
    rng, mu = random.Random(seed), math.log(p.boot_median_s)
    idle = lost = 0.0
    for _ in range(samples):
        boots = sorted(math.exp(rng.gauss(mu, p.boot_sigma)) for _ in range(nodes + spares))
        start = boots[nodes - 1]
        idle += sum(start - b for b in boots[:nodes])
        lost += sum(_billed(p.unbilled_fraction * b, start, p.delete_s) for b in boots[nodes:])
    return Gang(idle / samples, lost / samples, (idle + lost) / samples)  # spares lose unclaimed: no overlap


def ask_every_region(p: Physics, nodes: int, samples: int, seed: int) -> Gang:
    """Every region boots ``nodes`` VMs; the first to hold them all runs the gang."""
    rng, mu = random.Random(seed), math.log(p.boot_median_s)
    idle = lost = running = 0.0
    for _ in range(samples):
        regions = [sorted(math.exp(rng.gauss(mu, p.boot_sigma)) for _ in range(nodes)) for _ in range(p.regions)]
        winner = min(range(p.regions), key=lambda r: regions[r][-1])
        start = regions[winner][-1]
        idle += sum(start - b for boots in regions for b in boots if b <= start)
        running += sum(start - b for b in regions[winner])
        lost += sum(_billed(p.unbilled_fraction * b, start, p.delete_s)
                    for r, boots in enumerate(regions) if r != winner for b in boots)
    # A part claimed in a losing region waited inside its VM's bill: paid once.
    return Gang(idle / samples, lost / samples, (running + lost) / samples)


def report(mix: dict[int, float], rate_per_hour: float, p: Physics, samples: int = 40_000, seed: int = 11) -> list[str]:
    """Lines for ``make bench-bound``: per spare count, the idle ratio to ask-every-region's and what the
    spares cost, for gang sizes weighted as ``mix`` (nodes -> share of gangs)."""
    ask = {n: ask_every_region(p, n, samples, seed) for n in mix}
    ask_idle = sum(w * ask[n].idle_s for n, w in mix.items())
    ask_paid = sum(w * ask[n].paid_s for n, w in mix.items())
    lines = [f"== gangs: idle node-time waiting for the last node, VMs booted for each gang (one region, k spares), "
             f"gang sizes {', '.join(f'{n} ({w:.0%})' for n, w in mix.items())}; {p.regions} regions, lognormal boots "
             f"median {p.boot_median_s:.0f} s sigma {p.boot_sigma}; {samples:,} samples",
             f"  ask-every-region: {ask_idle / 60:.2f} node-min idle a gang, {ask_paid / 60:.2f} with its other boots billed",
             f"  {'spares':>6}  {'idle / ask':>10}  {'spares billed (VM-min a gang)':>29}  {'idle + spares / ask':>19}"]
    met = None
    for k in SPARES:
        runs = {n: booted_for(p, n, k, samples, seed) for n in mix}
        idle = sum(w * runs[n].idle_s for n, w in mix.items())
        lost = sum(w * runs[n].lost_s for n, w in mix.items())
        paid = sum(w * runs[n].paid_s for n, w in mix.items())
        lines.append(f"  {k:>6}  {idle / ask_idle:>9.2f}x  {lost / 60:>29.2f}  {paid / ask_paid:>18.2f}x")
        if met is None and idle / ask_idle <= 0.25:
            met = k
    warm = sum(w * n for n, w in mix.items()) * 60.0 / rate_per_hour
    lines.append(f"  idle <= 0.25x with VMs booted for the gang: {'from ' + str(met) + ' spares' if met is not None else 'not with up to ' + str(SPARES[-1]) + ' spares'}; "
                 f"a gang that finds its N VMs idle waits nothing, but N VMs kept idle between gang arrivals "
                 f"({rate_per_hour:g} an hour) cost about {warm:.0f} VM-min a gang")
    return lines


GANGS_MIX = {2: 0.6, 4: 0.4}  # zen_dev/sim/scenarios/gangs-mix.yaml: 1, 2 or 4 nodes at 5:3:2, gangs of 2 or more
GANGS_MIX_RATE = 3.0  # its gangs an hour: 6 jobs an hour, half of them gangs


def main() -> int:
    print("\n".join(report(GANGS_MIX, GANGS_MIX_RATE, Physics(boot_sigma=0.3))))  # gangs-mix's boots
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
