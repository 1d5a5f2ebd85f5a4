"""``zen explain`` and ``zen clusters``: a cluster's recent scaling decisions (a job's reasons are
``zen.cli.queues.explain_job``), and the GPU shapes, regions and limits a job may ask for
(docs/reference/cli.md)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from zen.cli.kit import Context, deployed_config, print_table


def cmd_explain(args, ctx: Context) -> int:
    from zen.store import fleet

    config = deployed_config()  # ZEN_PROJECT's: the quotas read are its
    gone = bool(args.cluster) and config.cluster(args.cluster) is None  # not a cluster: a job, or a cluster gone
    if gone:
        from zen.cli.queues import explain_job

        with ctx.database().transaction() as session:
            if _names_a_job(session, args.cluster) or not fleet.recent_decisions(session, args.cluster, 1):
                return explain_job(args.cluster, args.json, ctx.database())
        print(f"cluster {args.cluster} is no longer in the configuration: its last scaling decisions", file=sys.stderr)
    with ctx.database().transaction() as session:
        rows = fleet.recent_decisions(session, args.cluster, args.limit)
    rows.reverse()  # oldest first, like a log
    for row in rows:
        row["at"] = row["at"].isoformat()
    held: dict[str, dict[str, str]] = {}
    unread: str | None = f"cluster {args.cluster} is not in the configuration" if gone else None
    if not gone:  # else no pools whose quotas to read
        _, held, unread = quota_rows(config, [c for c in config.clusters if args.cluster in (None, c.name)])
    if args.json:  # the quotas the text names: cluster -> pool -> why (zen clusters --json's quota_held_back)
        print(json.dumps({"decisions": rows, "quota_held_back": held, "quotas_unread": unread}, indent=2))
        return 0
    print_table(rows, ("at", "cluster", "region", "action", "count", "vm", "reason"))
    if gone:
        return 0
    for cluster, regions in held.items():  # a quota, not capacity: raising it is the fix (docs/how-to/deploy.md)
        for text in regions.values():
            print(f"{cluster}: {text} (docs/how-to/deploy.md#gpu-quotas)")
    if unread:
        print(f"GPU quotas not read: {unread}")
    return 0


def _names_a_job(session, name: str) -> bool:
    """Whether ``name`` is a job's id or an array's (``zen explain NAME`` explains it then)."""
    from zen.store import repository
    from zen.store.jobstore import PostgresJobTx

    return repository.get_job(session, name) is not None or bool(PostgresJobTx(session).array_tasks(name))


def quotas_reachable() -> str | None:
    """Why Compute's quotas will not be read here (None: they may be): a local stack's Compute stand-in,
    or Google credentials (a key file, gcloud's application-default login) are needed; without either
    the client would first probe for a metadata server."""
    from pathlib import Path

    if os.environ.get("ZEN_COMPUTE_ENDPOINT") or os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return None
    gcloud = Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud")
    if (gcloud / "application_default_credentials.json").is_file():
        return None
    return "no Google credentials (`gcloud auth application-default login`) and no local stack"


def quota_rows(config, clusters) -> tuple[list[dict], dict[str, dict[str, str]], str | None]:
    """Compute's GPU quotas for ``clusters``' pools (``zen.adapters.quotas``, one read per region): rows
    (cluster, region, quota, in use of the limit, VMs that fit), the pools a quota holds back by cluster
    (region or pool -> why), and why they could not be read (None: read)."""
    from zen.adapters.quotas import QuotaReader, QuotaUnread
    from zen.core.quotas import ALL_REGIONS, gpu_metric, shortfall
    from zen.scaling.pricing import cluster_pools

    if (why := quotas_reachable()) is not None:
        return [], {}, why
    reader = QuotaReader(config.project)
    rows: list[dict] = []
    held: dict[str, dict[str, str]] = {}
    try:
        project = reader.project_wide()
        for cluster in clusters:
            for key, pool in cluster_pools(cluster).items():
                regional = reader.region(pool.region)
                metric = gpu_metric(cluster.gpu_type, pool.model)
                quota = regional.get(metric)
                rows.append({"cluster": cluster.name, "region": key, "quota": metric,
                             "in_use": f"{quota.usage:g}/{quota.limit:g}" if quota else "not reported",
                             "vms_that_fit": int(quota.free // cluster.gpu_count) if quota else None})
                short = shortfall(cluster.gpu_type, cluster.gpu_count, pool.region, (pool.model,), regional, project)
                if short is not None:
                    held.setdefault(cluster.name, {})[key] = short.text()
    except QuotaUnread as exc:
        return [], {}, str(exc)
    everywhere = project.get(ALL_REGIONS)
    if everywhere is not None:
        rows.append({"cluster": "(all)", "region": "all regions", "quota": ALL_REGIONS,
                     "in_use": f"{everywhere.usage:g}/{everywhere.limit:g}", "vms_that_fit": None})
    for row in rows:
        pools = held.get(row["cluster"], {})
        row["note"] = "holds it back" if row["region"] in pools else ""
    return rows, held, None


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
                    return current(session, config.pricing), ("the database's catalog prices" + _refresh_failing(session)
                                                               if config.pricing.catalog
                                                               else "the snapshot (pricing.catalog is false)")
            finally:
                db.close()
        except Exception as exc:  # noqa: BLE001 - prices are shown from the snapshot rather than not at all
            return current(None, config.pricing), f"the snapshot (the database could not be read: {exc})"
    return current(None, config.pricing), "the snapshot (no database configured)"


def _refresh_failing(session) -> str:
    """What to add when the tick's last read of the catalog failed (``vm_price_refresh``): the prices shown are then
    those stored before, however old; else nothing."""
    from zen.store.migrate import has_table
    from zen.store.prices import refresh_state

    try:  # (the prices were read already: a reader without this table's grant still sees them)
        row = refresh_state(session) if has_table(session, "vm_price_refresh") else {"error": None}
    except Exception:  # noqa: BLE001 - a note only
        return ""
    if row["error"] is None:
        return ""
    since = f"kept from {row['refreshed_at']:%Y-%m-%d}" if row["refreshed_at"] else "none stored yet"
    return (f"; its last read ({row['tried_at']:%Y-%m-%d %H:%M} UTC) failed, {since}: {row['error']} "
            "(the tick tries again hourly; its log says each failure)")


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
    config = deployed_config()  # ZEN_PROJECT's: the quotas read are its
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
    quotas, held, unread = quota_rows(config, config.clusters)
    if args.json:
        print(json.dumps([{**row, "prices": prices[row["cluster"]], "prices_from": where,
                           "quotas": [q for q in quotas if q["cluster"] == row["cluster"]],
                           "quota_held_back": held.get(row["cluster"], {})} for row in rows], indent=2))
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
    if unread:
        print(f"\nGPU quotas: not read ({unread}); see docs/how-to/deploy.md#gpu-quotas")
    else:
        print("\nGPU quotas (Compute's, read now; a VM that does not fit is refused with QUOTA_EXCEEDED whatever the "
              "capacity, and Zen passes the region over; raise them: docs/how-to/deploy.md#gpu-quotas):")
        print_table([{**q, "vms_that_fit": "" if q["vms_that_fit"] is None else q["vms_that_fit"]} for q in quotas],
                    ("cluster", "region", "quota", "in_use", "vms_that_fit", "note"))
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
