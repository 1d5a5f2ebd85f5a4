"""What one simulated run measured, and the per-policy summary the reports print.

Time-to-start percentiles (a job never started counts as waiting until the end of the run), jobs
never started, jobs stopped at their max_runtime_s, GPU VM-minutes paid, wasted and lost to preemptions,
input read across regions, warm cache hits, peak VMs, Compute API calls, limit violations and busy-delete
attempts; with prices, the dollars paid, per useful GPU-hour, against the price floor, and the GPU-hours
of rework.
Definitions: docs/reference/simulator.md#what-a-run-measures
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

JSON_KEYS = ("p50_start_s", "p95_start_s", "p99_start_s", "max_start_s", "never_started",
             "vm_minutes", "wasted_vm_minutes", "peak_vms", "api_calls", "stopped_at_max_runtime")
EXTRA_KEYS = ("jobs", "limit_violations", "busy_delete_attempts", "preemptions", "vms_created", "replay_s",
              "input_gb", "input_gb_cross_region", "cache_hits", "cache_misses", "staging_min_saved",
              "lost_vm_minutes")
# With the scenario's prices only (zen_dev.sim.scenario ``prices:``): beside JSON_KEYS and EXTRA_KEYS.
# With gangs in the job trace only (zen_dev.sim.gangs): beside JSON_KEYS.
GANG_KEYS = ("gangs", "gang_start_p50_s", "gang_start_p95_s", "gang_idle_node_minutes", "gangs_never_started",
             "gangs_split", "nodes_left_after_gang", "gang_assembly_timeouts", "gang_idle_given_back_node_minutes",
             "gang_stockout_releases", "gang_room_releases")
USD_PARTS = ("usd_useful", "usd_rework", "usd_boot", "usd_idle", "usd_unused_vms")  # add up to usd: RunResult.bill
DOLLAR_KEYS = ("usd", "usd_per_useful_gpu_hour", "useful_gpu_hours", "rework_gpu_hours",
               "floor_usd_per_useful_gpu_hour", "usd_vs_floor", *USD_PARTS, "usd_above_floor")


@dataclass
class RunResult:
    policy: str
    horizon_s: float
    starts: list[tuple[float, float | None]] = field(default_factory=list)  # (submit_s, first_start_s)
    vm_seconds: float = 0.0
    wasted_seconds: float = 0.0
    billed_now: int = 0
    peak_vms: int = 0
    api_calls: int = 0
    limit_violations: int = 0
    busy_delete_attempts: int = 0
    unknown_deletes: int = 0
    preemptions: int = 0
    preempted_jobs: int = 0
    stopped_at_max_runtime: int = 0  # jobs whose run was stopped at their max_runtime_s (FAILED, never rerun)
    vms_created: int = 0
    ticks: int = 0
    planner_s: float = 0.0
    wall_s: float = 0.0
    vm_series: list[tuple[float, int]] = field(default_factory=list)  # (t, VMs paid for) at each change
    pass_times: list[float] = field(default_factory=list)  # when a planning pass ran (any cluster)
    capacity_preemptions: int = 0  # of those preemptions, VMs taken back because a zone's capacity fell
    start_regions: list[tuple[float, str]] = field(default_factory=list)  # (t, region) at each job's first start
    input_gb: float = 0.0
    input_gb_cross_region: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    staging_s_saved: float = 0.0
    lost_seconds: float = 0.0  # paid runs of jobs cut short by a preemption (they run again from the start)
    priced: bool = False  # the scenario has prices: dollars() is reported
    usd: float = 0.0  # billed as GCE bills (from RUNNING, one-minute minimum, per second)
    useful_gpu_seconds: float = 0.0  # job runs that counted (not thrown away by a preemption), x GPUs per VM
    rework_gpu_seconds: float = 0.0  # job runs cut short by a preemption, x GPUs per VM
    floor_usd: float = 0.0  # the useful GPU-seconds at each cluster's cheapest listed price
    usd_useful: float = 0.0  # of usd: the runs that counted, at the price of the pool they ran in
    usd_rework: float = 0.0  # ... runs a preemption threw away
    usd_boot: float = 0.0  # ... boots (RUNNING to the agent) of VMs that ran a job
    usd_idle: float = 0.0  # ... VMs that ran a job, while idle or being deleted (and the minute's minimum)
    usd_unused_vms: float = 0.0  # ... VMs that never ran a job (lost races, spares, demand gone)
    gang_starts: list[tuple[float, float | None]] = field(default_factory=list)  # gangs' (submit_s, first_start_s)
    gang_idle_seconds: float = 0.0  # node-seconds VMs held a part while their gang waited for its last node
    gang_idle_given_back_seconds: float = 0.0  # of those, parts no gang ran from (given back, lost, still waiting)
    gangs_split: int = 0  # gang starts whose nodes were in more than one region
    nodes_left_after_gang: int = 0  # nodes still holding a gang after its attempt ended
    gang_assembly_timeouts: int = 0  # gangs not complete within assemble_s: parts given back, queued again
    gang_stockout_releases: int = 0  # gangs whose parts were given back sooner: their region stocked out
    gang_room_releases: int = 0  # ... or it could not hold the rest of the gang (the planner's gang_room)

    def waits(self) -> list[float]:
        """Time-to-start per job, never-started jobs counted until the horizon."""
        return [(start if start is not None else self.horizon_s) - submit for submit, start in self.starts]

    def gang_waits(self) -> list[float]:
        """Time-to-start per gang, never-started gangs counted until this run's horizon (runs pooled across
        scenarios, whose horizons differ, take each run's waits, not one horizon for all)."""
        return [(start if start is not None else self.horizon_s) - submit for submit, start in self.gang_starts]

    def summary(self) -> dict[str, float | int | None]:
        waits = sorted(self.waits())
        out: dict[str, float | int | None] = {
            "p50_start_s": _round(percentile(waits, 50)),
            "p95_start_s": _round(percentile(waits, 95)),
            "p99_start_s": _round(percentile(waits, 99)),
            "max_start_s": _round(waits[-1] if waits else None),
            "never_started": sum(1 for _, start in self.starts if start is None),
            "vm_minutes": round(self.vm_seconds / 60.0, 1),
            "wasted_vm_minutes": round(max(0.0, self.wasted_seconds) / 60.0, 1),
            "peak_vms": self.peak_vms,
            "api_calls": self.api_calls,
            "stopped_at_max_runtime": self.stopped_at_max_runtime,
        }
        assert tuple(out) == JSON_KEYS
        return out

    def extras(self) -> dict[str, float | int]:
        return {
            "jobs": len(self.starts), "limit_violations": self.limit_violations,
            "busy_delete_attempts": self.busy_delete_attempts, "preemptions": self.preemptions,
            "vms_created": self.vms_created, "replay_s": round(self.wall_s, 3),
            "input_gb": round(self.input_gb, 1), "input_gb_cross_region": round(self.input_gb_cross_region, 1),
            "cache_hits": self.cache_hits, "cache_misses": self.cache_misses,
            "staging_min_saved": round(self.staging_s_saved / 60.0, 1),
            "lost_vm_minutes": round(self.lost_seconds / 60.0, 1),
        }


    def gang_summary(self) -> dict[str, float | int | None]:
        """The GANG_KEYS: time-to-start of gangs (never-started ones counted until the horizon), as summary()."""
        waits = sorted(self.gang_waits())
        out = {
            "gangs": len(self.gang_starts),
            "gang_start_p50_s": _round(percentile(waits, 50)),
            "gang_start_p95_s": _round(percentile(waits, 95)),
            "gang_idle_node_minutes": round(self.gang_idle_seconds / 60.0, 1),
            "gangs_never_started": sum(1 for _, start in self.gang_starts if start is None),
            "gangs_split": self.gangs_split,
            "nodes_left_after_gang": self.nodes_left_after_gang,
            "gang_assembly_timeouts": self.gang_assembly_timeouts,
            "gang_idle_given_back_node_minutes": round(self.gang_idle_given_back_seconds / 60.0, 1),
            "gang_stockout_releases": self.gang_stockout_releases,
            "gang_room_releases": self.gang_room_releases,
        }
        assert tuple(out) == GANG_KEYS
        return out

    def bill(self, billed_s: float, usd_per_s: float, useful_s: float, lost_s: float, boot_s: float,
             ran_job: bool) -> None:
        """Add one VM incarnation's bill (``billed_s`` at ``usd_per_s``) to ``usd`` and split it: a VM
        that never ran a job is unused; one that did paid for its useful runs, its runs a preemption
        threw away, its billed boot, and the rest (idle, being deleted, the one-minute minimum)."""
        usd = billed_s * usd_per_s
        self.usd += usd
        if not ran_job:
            self.usd_unused_vms += usd
            return
        useful, lost, boot = useful_s * usd_per_s, lost_s * usd_per_s, boot_s * usd_per_s
        self.usd_useful += useful
        self.usd_rework += lost
        self.usd_boot += boot
        self.usd_idle += usd - useful - lost - boot

    def dollars(self) -> dict[str, float | None]:
        """The DOLLAR_KEYS (ratios None without useful work)."""
        useful_h = self.useful_gpu_seconds / 3600.0
        per_useful = self.usd / useful_h if useful_h > 0 else None
        floor = self.floor_usd / useful_h if useful_h > 0 else None
        out = {
            "usd": round(self.usd, 2),
            "usd_per_useful_gpu_hour": _round(per_useful, 4),
            "useful_gpu_hours": round(useful_h, 2),
            "rework_gpu_hours": round(self.rework_gpu_seconds / 3600.0, 2),
            "floor_usd_per_useful_gpu_hour": _round(floor, 4),
            "usd_vs_floor": _round(self.usd / self.floor_usd, 3) if self.floor_usd > 0 else None,
            **{key: round(getattr(self, key), 2) for key in USD_PARTS},
            "usd_above_floor": round(self.usd_useful - self.floor_usd, 2),  # of usd_useful: the pools' price
        }
        assert tuple(out) == DOLLAR_KEYS
        return out


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b of two figures: 0 against 0 is 1.0, more than 0 against 0 is inf; None where either is unknown."""
    if a is None or b is None:
        return None
    if b == 0:
        return 1.0 if a == 0 else float("inf")
    return a / b


def shown(value: float | None) -> str:
    """A ratio as the reports print it: two decimals, ``inf``, or ``-`` when unknown."""
    return "-" if value is None else ("inf" if value == float("inf") else f"{value:.2f}")


def percentile(sorted_values: list[float], q: float) -> float | None:
    """The q-th percentile of an ascending list (linear interpolation), None when empty."""
    if not sorted_values:
        return None
    rank = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)
