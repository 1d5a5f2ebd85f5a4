"""What ``make demo`` shows of dollars: the jobs Zen moved to a cheaper region than their cluster's
first (read from the scaling decisions, whose reasons name the prices compared), and the dollars each
policy pays on the simulator's priced scenario (``region-out-priced``)."""

from __future__ import annotations

import re

from zen.core.config import ZenConfig

_PRICE = re.compile(r"\$([0-9.]+)/h")
# A job's ask, in jobs or, where VMs take several jobs, in VMs, or a gang's, in its nodes' VMs (zen.scaling.gangs.wanted):
# its price follows. (A gang placed in the cheaper region is a job moved there: where it takes that region's places,
# the single jobs queued beside it go elsewhere, and the demo found no move when only the gang's was one.)
_JOBS_ASK = re.compile(r"(queued job\(s\) without a VM|VM\(s\) for queued jobs, several per VM"
                       r"|VM\(s\) for [0-9]+ queued gang\(s\)): \$")
SCENARIO = "region-out-priced"


def cheaper_moves(decisions: list[dict], config: ZenConfig) -> list[str]:
    """ADD decisions that chose a pool priced below the cluster's first region's, as lines for the summary:
    the chosen price is the reason's; the first region's, as any of the run's reasons named it (the prices
    the planner used), else the price table's (the snapshot under the configuration's overrides): a pass for
    a job of one region, or one made after the first region's stockout was found, does not name it."""
    from zen.core.prices import effective, load_snapshot, pool_prices

    table = effective(config.pricing, load_snapshot(), None)
    named: dict[str, float] = {}  # cluster -> its first region's price, as a reason named it
    for d in decisions:
        if (cluster := config.cluster(d["cluster"])) is None:
            continue
        own = d["region"] == cluster.regions[0] and _PRICE.search(d["reason"])  # an ask there: its own price
        if m := own or re.search(rf"\b{re.escape(cluster.regions[0])} \$([0-9.]+)/h", d["reason"]):
            named.setdefault(cluster.name, float(m[1]))
    lines = []
    for d in decisions:
        cluster = config.cluster(d["cluster"])
        if d["action"] != "ADD" or cluster is None or not _JOBS_ASK.search(d["reason"]):
            continue  # a job's ask (a hedge's or a spare's names its price too: no move of a job)
        first = cluster.regions[0]
        chosen = _PRICE.search(d["reason"])
        listed = pool_prices(table, cluster).get(first)
        first_usd = named.get(cluster.name, listed.usd_per_hour if listed is not None else None)
        if chosen and first_usd is not None and (d["region"] or "").split("/")[0] != first and float(chosen[1]) < first_usd:
            lines.append(f"  {d['at']:%H:%M:%S} {d['cluster']}/{d['region']}: {d['reason']}")
    return lines


def policy_dollars() -> list[str]:
    """Zen, the original system on standard VMs and cheapest-first on the priced simulator scenario."""
    from zen_dev.sim.jobs import load_jobs
    from zen_dev.sim.runner import run_policies
    from zen_dev.sim.scenario import load_scenario

    scenario = load_scenario(SCENARIO)
    results = run_policies(scenario, load_jobs(scenario), ["zen", "ask-every-region-standard", "cheapest-first"])
    lines = [f"  {'policy':<27} {'USD':>8} {'x floor':>8} {'p50 start':>10} {'p95 start':>10}"]
    for name, result in results.items():
        summary, dollars = result.summary(), result.dollars()
        lines.append(f"  {name:<27} {dollars['usd']:>8,.2f} {dollars['usd_vs_floor']:>8.2f} "
                     f"{summary['p50_start_s']:>9.0f}s {summary['p95_start_s']:>9.0f}s")
    return lines
