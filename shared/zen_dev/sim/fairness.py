"""The two-tenant flood (issue 14), for ``make bench``: team-a submits 1,000 jobs at once, then team-b
20, without queues (FIFO), with a 20-GPU queue each, and with both queues in a cohort. Target:
team-b's p95 time-to-start within one cold boot; also printed: team-a's p50 and quota violations
at any event (must be 0).
Setup and figures: docs/benchmarks/simulator.md#two-tenant-flood-queues
"""

from __future__ import annotations

import math
import random

from zen_dev.sim.jobs import SimJob
from zen_dev.sim.metrics import percentile
from zen_dev.sim.policies import make_policy
from zen_dev.sim.scenario import parse_scenario
from zen_dev.sim.world import Simulation

BOOT_MEDIAN_S, BOOT_SIGMA, TICK_S = 90, 0.3, 60
FLOOD, LATE, LATE_AT_S = 1000, 20, 1800

_SCENARIO = f"""description: two tenants, one cluster; team-a floods {FLOOD} jobs, then team-b submits {LATE}
seed: 41
horizon_s: 150000
tick_s: {TICK_S}
clusters:
  - {{name: 1xa100, gpu_count: 1, machine_type: a2-highgpu-1g, regions: [us-central1, us-west1],
     max_vms_per_region: 20, max_vms: 40}}
zones: {{us-central1: [us-central1-a], us-west1: [us-west1-b]}}
capacity: {{default: 100}}
boot: {{dist: lognormal, median_s: {BOOT_MEDIAN_S}, sigma: {BOOT_SIGMA}}}
"""
_QUEUES = """queues:
  - {name: team-a, quota: {1xa100: 20}, users: [alice]}
  - {name: team-b, quota: {1xa100: 20}, users: [bob]}
"""
_COHORT = """queues:
  - {name: team-a, cohort: lab, quota: {1xa100: 20}, users: [alice]}
  - {name: team-b, cohort: lab, quota: {1xa100: 20}, users: [bob]}
"""


def flood_jobs(seed: int = 41) -> list[SimJob]:
    rng = random.Random(seed)
    regions = ("us-central1", "us-west1")

    def job(n: int, user: str, at: float) -> SimJob:
        return SimJob(f"{user}-{n}", "1xa100", at, rng.lognormvariate(math.log(1800), 0.5), regions, 0, user)

    return ([job(n, "alice", rng.uniform(0, 60)) for n in range(FLOOD)]
            + [job(n, "bob", LATE_AT_S + rng.uniform(0, 60)) for n in range(LATE)])


def run(queues: str = "") -> tuple[dict[str, list[float]], int]:
    """Waits per user (never-started jobs count until the horizon) and quota violations."""
    scenario = parse_scenario(_SCENARIO + queues, source="two-tenant-flood.yaml", name="two-tenant-flood")
    jobs = flood_jobs()
    sim = Simulation(scenario, jobs, make_policy("zen"))
    sim.run()
    waits: dict[str, list[float]] = {}
    for job in sim.jobs:
        start = job.first_start_s if job.first_start_s is not None else sim.horizon
        waits.setdefault(job.spec.user, []).append(start - job.spec.submit_s)
    return {user: sorted(w) for user, w in waits.items()}, (sim.admission.violations if sim.admission else 0)


def report() -> list[str]:
    fifo, _ = run()
    fair, violations = run(_QUEUES)
    lent, lent_violations = run(_COHORT)
    violations += lent_violations
    boot_p95 = BOOT_MEDIAN_S * math.exp(1.645 * BOOT_SIGMA)
    target = boot_p95 + TICK_S
    b_fifo, b_fair = percentile(fifo["bob"], 95), percentile(fair["bob"], 95)
    ok = b_fair <= target and violations == 0
    return [
        f"== two-tenant flood: team-a submits {FLOOD} jobs, then team-b {LATE} (1-GPU cluster, 40 VMs, "
        "queues of 20 GPUs each)",
        f"  team-b p95 time-to-start: FIFO {b_fifo:,.0f} s, queues {b_fair:,.0f} s "
        f"(target <= one cold boot: {target:.0f} s): {'yes' if ok else 'NO'}",
        f"  team-a p50 time-to-start: FIFO {percentile(fifo['alice'], 50):,.0f} s, "
        f"queues {percentile(fair['alice'], 50):,.0f} s (it may not use team-b's idle quota)",
        f"  in a cohort (team-a borrows team-b's idle quota; no preemption simulated): team-b p95 "
        f"{percentile(lent['bob'], 95):,.0f} s, team-a p50 {percentile(lent['alice'], 50):,.0f} s",
        f"  quota violations at any event: {violations}",
    ]


if __name__ == "__main__":
    print("\n".join(report()))
