"""``zen explain`` and ``zen clusters``: a cluster's recent scaling decisions (a job's reasons are
``zen.cli.queues.explain_job``), and the GPU shapes, regions and limits a job may ask for
(docs/reference/cli.md)."""

from __future__ import annotations

import json
import os
from typing import Any

from zen.cli.kit import Context, print_table


def cmd_explain(args, ctx: Context) -> int:
    from zen.core.config import load_config
    from zen.store import fleet

    if args.cluster and load_config().cluster(args.cluster) is None:  # not a cluster: a job
        from zen.cli.queues import explain_job

        return explain_job(args.cluster, args.json, ctx.database())
    with ctx.database().transaction() as session:
        rows = fleet.recent_decisions(session, args.cluster, args.limit)
    rows.reverse()  # oldest first, like a log
    for row in rows:
        row["at"] = row["at"].isoformat()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, ("at", "cluster", "region", "action", "count", "vm", "reason"))
    return 0


def known_prices(config) -> tuple[object, str]:
    """The prices Zen uses now (``zen.store.prices.current``) and where they were read: with a database
    (ZEN_DATABASE_URL, Cloud SQL or a local stack), its catalog prices under the configuration's
    overrides; else, or when it cannot be read, the committed snapshot under them."""
    from zen.cli.kit import database, database_configured
    from zen.store.prices import current

    if database_configured():
        try:
            db = database()
            try:
                with db.transaction() as session:
                    return current(session, config.pricing), "the database's catalog prices"
            finally:
                db.close()
        except Exception as exc:  # noqa: BLE001 - prices are shown from the snapshot rather than not at all
            return current(None, config.pricing), f"the snapshot (the database could not be read: {exc})"
    return current(None, config.pricing), "the snapshot (no database configured)"


def price_rows(table, cluster) -> list[dict]:
    """One row per region and provisioning model (every model GCE has; ``used``: whether the cluster's
    ``provisioning`` lists it): USD per VM-hour and per GPU-hour, where the price came from; ``None``
    prices where it has none."""
    from zen.core.provisioning import MODELS

    rows = []
    for region in cluster.regions:
        for model in MODELS:
            price = table.lookup(cluster.machine_type, region, model)
            rows.append({"cluster": cluster.name, "region": region, "model": model,
                         "used": model in cluster.provisioning,
                         "usd_per_vm_hour": round(price.usd_per_hour, 4) if price else None,
                         "usd_per_gpu_hour": round(price.usd_per_hour / cluster.gpu_count, 4) if price else None,
                         "source": price.source if price else None,
                         "fetched": price.fetched_at.date().isoformat() if price and price.fetched_at else None})
    return rows


def worst_case_usd_per_hour(config, prices: dict[str, list[dict]]) -> tuple[float, int, list[str]]:
    """What the configuration lets Zen spend in an hour at most: every cluster at its ``max_vms``, each VM
    at the dearest price among the cluster's regions and the models it uses (a region's limit may be
    lower; this is the bound a budget should be read against). Returns (USD per hour, VMs, the clusters
    with a used pool Zen knows no price for)."""
    total, vms, unpriced = 0.0, 0, []
    for cluster in config.clusters:
        used = [row["usd_per_vm_hour"] for row in prices[cluster.name] if row["used"]]
        if any(price is None for price in used) or not used:
            unpriced.append(cluster.name)
        known = [price for price in used if price is not None]
        total += cluster.max_vms * (max(known) if known else 0.0)
        vms += cluster.max_vms
    return total, vms, unpriced


def cmd_clusters(args) -> int:
    from zen.core.config import load_config

    config = load_config()
    table, where = known_prices(config)
    rows: list[dict[str, Any]] = [{"cluster": c.name, "gpus": f"{c.gpu_count}x {c.gpu_type}", "machine": c.machine_type,
             "regions": ",".join(c.regions), "provisioning": ",".join(c.provisioning),
             "max_vms_per_region": c.max_vms_per_region, "max_vms": c.max_vms,
             "min_vms": c.min_vms, "jobs_per_vm": c.max_jobs_per_vm,
             "tags": "; ".join(f"{r}: {','.join(c.tags_of(r))}" for r in c.regions if c.tags_of(r)),
             # the queues with quota here (zen queues: what they hold now, and whether you may use them)
             "queues": ",".join(f"{q.name}:{q.quota[c.name]}" for q in config.queues if c.name in q.quota)}
            for c in config.clusters]
    prices = {c.name: price_rows(table, c) for c in config.clusters}
    if args.json:
        print(json.dumps([{**row, "prices": prices[row["cluster"]]} for row in rows], indent=2))
        return 0
    print_table(rows, ("cluster", "gpus", "machine", "regions", "provisioning", "max_vms_per_region", "max_vms",
                       "min_vms", "jobs_per_vm", "tags") + (("queues",) if config.queues else ()))
    print(f"\nPrices per region and provisioning model (from {where}; overrides: pricing in the configuration):")
    print_table([{**p, **{k: "unpriced" for k in ("usd_per_vm_hour", "usd_per_gpu_hour") if p[k] is None},
                  "used": "yes" if p["used"] else "no", "source": p["source"] or "-", "fetched": p["fetched"] or "-"}
                 for c in config.clusters for p in prices[c.name]],
                ("cluster", "region", "model", "used", "usd_per_vm_hour", "usd_per_gpu_hour", "source", "fetched"))
    worst, vms, unpriced = worst_case_usd_per_hour(config, prices)
    print(f"\nAt most {vms} GPU VMs at once (every cluster's max_vms): up to ${worst:,.2f} an hour, "
          f"${worst * 24 * 30:,.0f} over a 30-day month, at the dearest price each cluster may pay"
          + (f" (no price known for some pools of {', '.join(unpriced)}: more)" if unpriced else "")
          + (f". Idle, {kept} VM(s) kept (min_vms)." if (kept := sum(c.min_vms for c in config.clusters))
             else ". Idle, no GPU VM runs (min_vms 0)."))
    print(f"\nAsk with --cluster NAME, or --gpu-type T --gpu-count N (the smallest fitting cluster); "
          f"--region narrows a cluster's regions. Limits: max_runtime_s {config.limits.max_runtime_s}, "
          f"max_attempts {config.attempts.max_max_attempts} (configuration: {os.environ.get('ZEN_CONFIG') or 'default'})."
          + (" queues: queue:GPUs of quota on each cluster; `zen queues` shows their use and whether you may submit, "
             "--queue NAME picks one." if config.queues else ""))
    return 0


def register(sub, ctx: Context) -> None:
    explain = sub.add_parser("explain", help="why a job waits (JOB), or recent scaling decisions (CLUSTER)")
    explain.add_argument("cluster", nargs="?", metavar="JOB|CLUSTER",
                         help="a job: why it waits; a cluster: only its decisions")
    explain.add_argument("--limit", type=ctx.positive, default=50, help="at most this many decisions (default 50)")
    explain.add_argument("--json", action="store_true", help="print JSON")
    explain.set_defaults(func=lambda args: cmd_explain(args, ctx))

    clusters = sub.add_parser("clusters", help="the GPU shapes, regions, limits and prices a job may ask for")
    clusters.add_argument("--json", action="store_true", help="print a JSON array")
    clusters.set_defaults(func=cmd_clusters)
