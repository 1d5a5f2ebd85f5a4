"""``make bench``'s dollar section: zen against the original system on standard VMs
(``ask-every-region-standard``) and against ``cheapest-first``, in dollars per useful GPU-hour against the
price floor, on the fixed and held-out capacity scenarios with generated price tables.

Each scenario gets a price table drawn from a seed (:func:`price_table`): per region a standard price
(a per-GPU list price times a region factor of 1.00-1.30), spot at 0.25-0.60x of it and flex-start at
0.45-0.55x, drawn per region, so spot's cheapest region is not the standard one's. Every cluster may
use spot and standard (spot first: ``ask-every-region`` asks spot). ``TUNING_PRICE_SEEDS`` are the ones to tune
on; ``HELDOUT_PRICE_SEEDS`` only run here. A second pass gives every job a checkpoint
every 10 minutes, for the rework target on scenarios where spot VMs are taken back. Then the same with
flex-start listed too (``WITH_FLEX``: a cluster may list it, and the floor is then the cheapest of three).
Last, :func:`share_report`: zen with a share of the jobs accepting standard VMs only (``provisioning:
standard``), on the scenarios where capacity drops: what the original's speed costs in dollars there.
Targets and figures: docs/benchmarks/simulator.md#dollars
"""

from __future__ import annotations

import random
import zlib
from dataclasses import replace

from zen_dev.sim.jobs import SimJob, load_jobs
from zen_dev.sim.metrics import USD_PARTS, RunResult
from zen_dev.sim.scenario import Scenario, SimCluster

USD_PER_GPU_HOUR = 3.0  # standard, before the region factor: about the A100 list price per GPU
TUNING_PRICE_SEEDS = (1, 2)
HELDOUT_PRICE_SEEDS = (36317,)  # drawn at random on 2026-11-29; never tune on it
POLICIES = ("zen", "ask-every-region-standard", "cheapest-first", "ask-every-region")
CHECKPOINT_EVERY_S = 600.0
MODELS = ("spot", "standard")  # what the bench's clusters list, the first the primary
WITH_FLEX = ("spot", "standard", "flex-start")
SEEDS = 2  # run seeds pooled per scenario and price table
STANDARD_SHARES = (0.0, 0.1, 0.2, 0.35, 1.0)  # share_report: the jobs accepting standard VMs only
DROP_SCENARIOS = ("rolling-stockouts", "all-out-30min", "gcp-a100-trace")  # capacity drops take spot VMs back

TARGETS = (  # (label, what it checks)
    ("x floor <= 1.30", "zen's dollars per useful GPU-hour over the price floor"),
    ("p95 <= 1.10x std", "zen's p95 start over ask-every-region-standard's"),
    ("p50 <= 1.00x std", "zen's p50 start over ask-every-region-standard's"),
    ("never <= std", "no job ask-every-region-standard starts is left unstarted by zen"),
    ("usd <= 0.90x cheapest", "zen's dollars over cheapest-first's"),
    ("p95 <= 0.80x cheapest", "zen's p95 start over cheapest-first's"),
)


def price_table(regions: tuple[str, ...], gpus: int, seed: int) -> dict[str, dict[str, float]]:
    """Region -> model -> USD per VM-hour for a VM of ``gpus`` GPUs (deterministic in ``seed``)."""
    rng = random.Random(f"prices-{seed}")
    table = {}
    for region in regions:
        standard = USD_PER_GPU_HOUR * gpus * rng.uniform(1.0, 1.3)
        table[region] = {"standard": round(standard, 3), "spot": round(standard * rng.uniform(0.25, 0.6), 3),
                         "flex-start": round(standard * rng.uniform(0.45, 0.55), 3)}
    return table


def priced(scenario: Scenario, seed: int, models: tuple[str, ...] = MODELS) -> Scenario:
    """The scenario with every cluster priced from ``seed`` and using ``models`` (its first the primary)."""
    clusters: list[SimCluster] = []
    tables: dict[str, dict[str, dict[str, float]]] = {}
    for cluster in scenario.clusters:
        table = price_table(cluster.limits.regions, cluster.gpu_count, seed * 1000 + len(clusters))
        tables[cluster.limits.name] = table
        floor = min(table[r][m] for r in cluster.limits.regions for m in models)
        clusters.append(replace(cluster, models=models, table=table, floor_usd_per_vm_hour=floor))
    spec = scenario.spec.model_copy(update={"prices": next(iter(tables.values()))})
    return replace(scenario, spec=spec, clusters=clusters, name=f"{scenario.name} @prices {seed}")


def with_checkpoints(jobs: list[SimJob], every_s: float = CHECKPOINT_EVERY_S) -> list[SimJob]:
    return [replace(job, checkpoint_every_s=every_s) for job in jobs]


def with_standard_share(jobs: list[SimJob], share: float) -> list[SimJob]:
    """The jobs with about ``share`` of them accepting standard VMs only: those whose id's CRC-32 falls in
    the lowest ``share`` of its range (the same jobs for every policy, seed and larger share)."""
    cut = share * 2**32
    return [replace(job, provisioning="standard") if zlib.crc32(job.job_id.encode()) < cut else job for job in jobs]


def pooled(runs: list[RunResult]) -> RunResult:
    """Several seeds' runs of one policy as one: every job's wait, the dollars and GPU-hours summed."""
    out = RunResult(policy=runs[0].policy, horizon_s=runs[0].horizon_s, priced=True)
    for run in runs:
        out.starts += run.starts
        for key in ("usd", "useful_gpu_seconds", "rework_gpu_seconds", "floor_usd", "preemptions", "lost_seconds",
                    *USD_PARTS):
            setattr(out, key, getattr(out, key) + getattr(run, key))
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def verdicts(results: dict[str, RunResult]) -> dict[str, tuple[float | None, bool | None]]:
    """Each target: (the ratio it judges, whether it holds; None when a policy is missing)."""
    zen, std, cheap = (results.get(n) for n in ("zen", "ask-every-region-standard", "cheapest-first"))
    out: dict[str, tuple[float | None, bool | None]] = {}
    if zen is None:
        return out
    z, zd = zen.summary(), zen.dollars()
    vs_floor = zd["usd_vs_floor"]
    out["x floor <= 1.30"] = (vs_floor, None if vs_floor is None else vs_floor <= 1.30)
    if std is not None:
        s = std.summary()
        for label, key, limit in (("p95 <= 1.10x std", "p95_start_s", 1.10), ("p50 <= 1.00x std", "p50_start_s", 1.00)):
            ratio = _ratio(z[key], s[key])
            out[label] = (ratio, z[key] is not None and s[key] is not None and z[key] <= limit * s[key])
        never = any(zs is None and ss is not None for (_, zs), (_, ss) in zip(zen.starts, std.starts))
        out["never <= std"] = (float(z["never_started"]) - float(s["never_started"] or 0), not never)
    if cheap is not None:
        c = cheap.summary()
        ratio = _ratio(zen.usd, cheap.usd)
        out["usd <= 0.90x cheapest"] = (ratio, None if ratio is None else ratio <= 0.90)
        p95 = _ratio(z["p95_start_s"], c["p95_start_s"])
        out["p95 <= 0.80x cheapest"] = (p95, None if p95 is None else p95 <= 0.80)
    return out


def rework_share(result: RunResult) -> float | None:
    """Rework over useful GPU-hours (None without useful work)."""
    return result.rework_gpu_seconds / result.useful_gpu_seconds if result.useful_gpu_seconds > 0 else None


def run(scenario: Scenario, jobs: list[SimJob] | None = None, seeds: int = SEEDS) -> dict[str, RunResult]:
    from zen_dev.sim.runner import run_policies
    jobs = load_jobs(scenario) if jobs is None else jobs
    runs = [run_policies(scenario, jobs, list(POLICIES), seed=scenario.spec.seed + k) for k in range(seeds)]
    return {policy: pooled([r[policy] for r in runs]) for policy in runs[0]}


def above_floor(result: RunResult) -> str:
    """Where a policy's dollars above the floor went, in units of the floor's dollars (they add up to its
    x floor minus 1): useful runs in dearer pools, runs a preemption threw away, boots, idle VMs, VMs that never ran a job."""
    floor = result.floor_usd
    if floor <= 0:
        return "-"
    parts = (("pools", result.usd_useful - floor), ("lost runs", result.usd_rework), ("boots", result.usd_boot),
             ("idle", result.usd_idle), ("unused VMs", result.usd_unused_vms))
    return ", ".join(f"{label} +{usd / floor:.2f}" for label, usd in parts)


def _cell(value: float | None, ok: bool | None) -> str:
    shown = "-" if value is None else f"{value:.2f}"
    return f"{shown} {'n/a' if ok is None else ('yes' if ok else 'NO')}"


def report(scenarios: list[tuple[Scenario, bool]], seeds: int = SEEDS, models: tuple[str, ...] = MODELS,
           rework: bool = True) -> list[str]:
    """The dollar section: per scenario and price table, each policy's dollars against the floor and
    each target's ratio and verdict; then (``rework``) rework with checkpoints where preemptions happened.
    ``scenarios``: (scenario, held out); ``models``: what every cluster lists, the first its primary."""
    lines = ["== dollars: zen vs ask-every-region-standard (the original system) and cheapest-first, "
             f"{'+'.join(models)}, {seeds} seeds pooled per price table"]
    head = f"{'scenario @ price table':<44}" + "".join(f"{label:>24}" for label, _ in TARGETS)
    lines.append(head)
    held: dict[bool, list[bool]] = {False: [], True: []}
    rework_lines = []
    for base, heldout in scenarios:
        for seed in (HELDOUT_PRICE_SEEDS if heldout else TUNING_PRICE_SEEDS):
            scenario = priced(base, seed, models)
            jobs = load_jobs(scenario)
            results = run(scenario, jobs, seeds)
            verdict = verdicts(results)
            name = scenario.name + (" (held out)" if heldout else "")
            lines.append(f"{name[:43]:<44}" + "".join(f"{_cell(*verdict.get(label, (None, None))):>24}"
                                                       for label, _ in TARGETS))
            lines.append("    " + "   ".join(
                f"{p} ${r.usd:,.0f} ({r.dollars()['usd_vs_floor']}x floor)" for p, r in results.items()))
            lines += [f"    {p} over the floor: {above_floor(results[p])}" for p in ("zen", "cheapest-first")]
            held[heldout] += [ok for _, ok in verdict.values() if ok is not None]
            if rework and results["zen"].preemptions:
                checkpointed = run(scenario, with_checkpoints(jobs), seeds)["zen"]
                share, before = rework_share(checkpointed), rework_share(results["zen"])
                rework_lines.append(
                    f"  {name[:43]:<44} rework {share or 0:.1%} of useful GPU-h with a checkpoint every "
                    f"{CHECKPOINT_EVERY_S / 60:.0f} min ({before or 0:.1%} without): "
                    f"{'yes' if share is not None and share <= 0.05 else 'NO'} (<= 5%)")
    if rework:
        lines += ["  rework with checkpoints (zen), scenarios where spot VMs were taken back:"] + (
            rework_lines or ["  (no preemptions in these runs)"])
    for key, label in ((False, "tuning"), (True, "held out")):
        if held[key]:
            lines.append(f"  {label}: {sum(held[key])} of {len(held[key])} target checks hold")
    return lines


def share_report(scenarios: list[Scenario], seeds: int = SEEDS) -> list[str]:
    """Zen with each of ``STANDARD_SHARES`` of the jobs on standard VMs only (the rest on spot or standard, as
    zen ranks them) against ``ask-every-region-standard`` on the same jobs (it runs every job on standard):
    zen's x floor, its p95 and p50 start over the original's, and which of the first targets hold.
    ``scenarios``: the tuning scenarios to price (each at ``TUNING_PRICE_SEEDS``)."""
    from zen_dev.sim.runner import run_policies
    lines = [f"== dollars: zen with a share of its jobs on standard VMs only (provisioning: standard), "
             f"{'+'.join(MODELS)}, {seeds} seeds pooled; x floor / p95 over the original's / p50 over it",
             f"{'scenario @ price table':<30}" + "".join(f"{f'{share:.0%} standard':>26}" for share in STANDARD_SHARES)]
    labels = [label for label, _ in TARGETS[:4]]
    for base in scenarios:
        for seed in TUNING_PRICE_SEEDS:
            scenario = priced(base, seed)
            jobs = load_jobs(scenario)
            std = pooled([run_policies(scenario, jobs, ["ask-every-region-standard"], seed=scenario.spec.seed + k)
                          ["ask-every-region-standard"] for k in range(seeds)])
            cells = []
            for share in STANDARD_SHARES:
                shared = with_standard_share(jobs, share)
                zen = pooled([run_policies(scenario, shared, ["zen"], seed=scenario.spec.seed + k)["zen"]
                              for k in range(seeds)])
                verdict = verdicts({"zen": zen, "ask-every-region-standard": std})
                held = sum(1 for label in labels if verdict[label][1])
                ratios = " / ".join("-" if verdict[label][0] is None else f"{verdict[label][0]:.2f}"
                                    for label in labels[:3])
                cells.append(f"{ratios} ({held}/4)")
            lines.append(f"{scenario.name[:29]:<30}" + "".join(f"{cell:>26}" for cell in cells))
    lines.append("  (n/4): of x floor <= 1.30, p95 <= 1.10x and p50 <= 1.00x the original's, no more jobs never "
                 "started, how many hold")
    return lines
