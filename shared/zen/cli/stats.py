"""``zen stats [--window MINUTES] [--json]``: the operator's figures from Postgres, under the names of
the Cloud Monitoring metrics (``zen.telemetry.METRICS``; terraform/monitoring.tf), so the local stack
and the Console speak one vocabulary, and ``attempt_usd``, no log metric: what the attempts that ended
in the window cost. Gauges are read now, counters and percentiles over the window
(default: the last hour). Which metrics it has and lacks: docs/reference/metrics.md. A read command:
it never starts or creates a database (``zen.cli.kit.database``).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from typing import Any, Callable

from zen import telemetry
from zen.cli.kit import Context


def register(sub, ctx: Context) -> None:
    stats = sub.add_parser("stats", help="jobs, starts, VMs, stockouts, rejections, outbox: the dashboard's figures")
    stats.add_argument("--window", type=ctx.positive_number, default=60.0, help="minutes counted by counters and percentiles")
    stats.add_argument("--json", action="store_true", help="print one JSON object keyed by metric name")
    stats.set_defaults(func=lambda args: cmd_stats(args, ctx.database))


def collect(session, clusters: dict[str, list[str]], now: datetime, window_s: float) -> dict[str, Any]:
    """Every figure ``zen stats`` shows, keyed by metric name. ``clusters``: name -> pools (its regions x
    provisioning models, ``zen.core.provisioning.pools_of``; with one model, its regions), which the scaling
    memory's blocked rows are keyed by and the dashboard's ``zen_cluster_stocked_out`` counts."""
    from zen.store import stats

    since = now - timedelta(seconds=window_s)
    jobs = stats.active_jobs(session)  # in flight only, as the dashboard's zen_jobs (jobs.count) counts
    blocked = stats.run(session, "blocked_regions", now=now)
    queued = {r["cluster"]: r["jobs"] for r in jobs if r["status"] == "QUEUED"}
    blocked_by_cluster = Counter(r["cluster"] for r in blocked if r["region"] in clusters.get(r["cluster"], ()))
    rejected = Counter((r["source"], telemetry.reason_class(r["reason"]))
                       for r in stats.run(session, "rejected_messages", since=since))
    return {
        "zen_jobs": jobs,
        "zen_job_status_changes": stats.run(session, "job_status_changes", since=since),
        "zen_time_to_start": stats.run(session, "time_to_start", since=since),
        "zen_vms": stats.run(session, "vms_by_state"),
        "zen_region_blocked": blocked,
        "zen_cluster_stocked_out": [
            {"cluster": name, "queued_jobs": queued.get(name, 0), "blocked_regions": blocked_by_cluster[name],
             "regions": len(pools),  # pools, as the dashboard's line counts them (zen.telemetry.log_pass)
             "stocked_out": telemetry.stocked_out_now(queued.get(name, 0), blocked_by_cluster[name], len(pools))}
            for name, pools in clusters.items()],
        "zen_oldest_queued": stats.run(session, "oldest_queued", now=now),
        "zen_scaling_decisions": stats.run(session, "scaling_decisions", since=since),
        "zen_rejected_messages": [{"source": s, "reason_class": c, "messages": n}
                                  for (s, c), n in sorted(rejected.items())],
        "zen_lost_attempts": stats.run(session, "lost_attempts", since=since),
        "zen_outbox_backlog_age": [stats.outbox_backlog(session, now)],
        "zen_gangs_waiting": stats.run(session, "gangs_waiting"),
    }


USD_FIGURE = "attempt_usd"  # not a log metric: what the attempts that ended in the window cost
USD_DOC = ("USD of the attempts that ended in the window, per cluster, region and provisioning model, each billed "
           "per second at the price its VM was billed at, in its region and model (not a log metric)")


def attempt_dollars(session, since: datetime, pricer) -> list[dict[str, Any]]:
    """What the attempts that ended since ``since`` cost, per cluster, region and provisioning model, each
    billed per second at the price its VM was billed at, in its region and model (``zen.cli.usage.Pricer``; ``usd`` None
    where one was unpriced)."""
    from zen.store import usage

    sums: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in usage.run(session, "attempt_seconds", by="total", since=since):
        region, model = row["region"] or "(none)", pricer.model(row) or "(unknown)"
        target = sums.setdefault((row["cluster"], region, model), {
            "cluster": row["cluster"], "region": region, "model": model, "attempts": 0, "vm_hours": 0.0, "usd": 0.0})
        cost = pricer.attempt(row, float(row["seconds"]))
        target["attempts"] += 1
        target["vm_hours"] += float(row["seconds"]) * float(row["vm_share"]) / 3600
        target["usd"] = None if cost is None or target["usd"] is None else target["usd"] + cost
    return [{**r, "vm_hours": round(r["vm_hours"], 3), "usd": None if r["usd"] is None else round(r["usd"], 2)}
            for _, r in sorted(sums.items())]


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) or type(value).__name__ == "Decimal":
        return round(float(value), 1)
    return value


def cmd_stats(args, database: Callable[[], Any]) -> int:
    from zen.cli.kit import CliError, print_table
    from zen.cli.usage import Pricer, shown_unpriced, unpriced_note
    from zen.core.config import load_config
    from zen.core.provisioning import pools_of
    from zen.store import stats
    from zen.store.migrate import has_table
    from zen.store.prices import current
    from zen.store.usage import read_snapshot

    db = database()
    config = load_config()
    try:
        with db.transaction() as session:
            read_snapshot(session)
            if not has_table(session, "jobs"):
                raise CliError("the database has no Zen schema yet: run zen db migrate")
            now = stats.database_now(session)  # (this machine's clock may be behind the rows')
            pools = {c.name: list(pools_of(c.regions, c.provisioning)) for c in config.clusters}
            figures = collect(session, pools, now, args.window * 60)
            pricer: Pricer | None = None
            if has_table(session, "attempt_usage"):
                pricer = Pricer(current(session, config.pricing), {c.name: c for c in config.clusters})
                figures[USD_FIGURE] = attempt_dollars(session, now - timedelta(seconds=args.window * 60), pricer)
    finally:
        db.close()
    # The dollars' rows keep their cents and thousandths of an hour (a short run is not 0.0 VM-hours at a cost).
    figures = {name: [row if name == USD_FIGURE else {k: _plain(v) for k, v in row.items()} for row in rows]
               for name, rows in figures.items()}
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    for name, rows in figures.items():
        print(f"\n{name}: {telemetry.METRICS.get(name, USD_DOC)}")
        if name == USD_FIGURE:
            rows = shown_unpriced(rows)
        if rows:
            print_table(rows, list(rows[0]))
        else:
            print("  (none)")
    if pricer is not None and pricer.unpriced:
        print(unpriced_note(sorted(pricer.unpriced)))
    return 0
