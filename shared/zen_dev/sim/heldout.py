"""Held-out capacity scenarios, generated from the shared GCP A100 trace by re-zoning, time-shifting
and re-scaling it, for ``make bench``.

The planner must not be tuned on these: ``HELDOUT_SEEDS`` are only run by the benchmark. Tune on the
fixed scenarios and on :data:`TUNING_SEED` (same generator, another draw). :func:`heldout_scenario`
raises ``TraceUnavailable`` when the traces are absent (the benchmark then skips it).
What a draw holds: docs/benchmarks/simulator.md#what-it-runs
"""

from __future__ import annotations

import random

from zen_dev.sim.scenario import Scenario, parse_scenario, traces_dir

TRACE_ZONES = ("us-central1-a", "us-central1-b", "us-west1-b", "us-east1-b", "europe-west4-a", "asia-northeast1-a")
TRACE_SECONDS = 770 * 150  # the trace's length
REGIONS = ("us-central1", "europe-west4", "asia-northeast1")
# Run by make bench only: never tune on these. Drawn at random on 2026-11-28 to
# replace 69148, 87463 and 92312 (drawn on 2026-11-24, replacing 20261 and 20262), whose figures
# had been printed in the README three runs running (watched, if not tuned on); the old ones remain
# valid draws of the same generator for anyone's tuning loop.
HELDOUT_SEEDS = (36410, 36301, 44304)
TUNING_SEED = 7


def heldout_text(seed: int) -> str:
    """The scenario YAML for one draw (deterministic in ``seed``)."""
    rng = random.Random(f"heldout-{seed}")
    zones, traces = {}, []
    for region in REGIONS:
        zones[region] = [f"{region}-a", f"{region}-b"]
        for zone in zones[region]:
            source = rng.choice(TRACE_ZONES)
            offset = rng.randrange(0, TRACE_SECONDS, 150)
            scale = rng.choice((1, 2, 3))
            traces.append(f'    - {{file: "${{traces}}/gcp-a100-availability/{source}_a100_40gb_8.json", '
                          f"zone: {zone}, scale: {scale}, offset_s: {offset}, loop: true}}")
    rate = rng.choice((6, 8, 10, 12))
    duration = rng.choice((1200, 1800, 2400, 3600))
    zone_lines = "\n".join(f"  {region}: [{', '.join(z)}]" for region, z in zones.items())
    return f"""description: held-out draw {seed} of the GCP A100 trace (re-zoned, shifted, re-scaled), light load
seed: {seed}
clusters:
  - {{name: 1xa100, gpu_count: 1, machine_type: a2-highgpu-1g,
     regions: [{', '.join(REGIONS)}], max_vms_per_region: 8, max_vms: 16}}
zones:
{zone_lines}
capacity:
  default: 0
  traces:
{chr(10).join(traces)}
boot: {{dist: lognormal, median_s: 90, sigma: 0.35}}
jobs:
  kind: synthetic
  count: 400
  arrivals: {{kind: poisson, rate_per_hour: {rate}}}
  duration: {{dist: lognormal, median_s: {duration}, sigma: 0.8}}
"""


def heldout_scenario(seed: int) -> Scenario:
    return parse_scenario(heldout_text(seed), source=f"heldout-{seed}.yaml", base_dir=traces_dir(),
                          name=f"heldout-{seed}")
