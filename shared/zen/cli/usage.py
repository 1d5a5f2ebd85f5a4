"""``zen usage [--since AGE|DATE] [--by user|queue|region] [--json]``: GPU-hours, VM-hours and their
estimated cost per user, queue or region, read from ``attempt_usage`` (``zen.store.usage``), with the
fleet's VM-hours ``--by region``. What is counted, the window and the estimate:
docs/explanations/accounting.md. A read command: it never starts or creates a database
(``zen.cli.kit.database``).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from zen.cli.kit import CliError, Context, print_table

DEFAULT_SINCE = timedelta(days=7)
COLUMNS = ("jobs", "attempts", "gpu_hours", "vm_hours", "est_usd")
FLEET_COLUMNS = ("fleet_vm_hours", "fleet_est_usd")


def register(sub, ctx: Context) -> None:
    from zen.store.usage import GROUPINGS

    usage = sub.add_parser("usage", help="GPU-hours, VM-hours and estimated cost per user, queue or region")
    usage.add_argument("--since", type=ctx.since, metavar="AGE|DATE",
                       help="attempts that ended since: an age (24h, 7d) or a date (2026-11-20); default 7d")
    usage.add_argument("--by", choices=GROUPINGS, default="user", help="group by (default: user)")
    usage.add_argument("--json", action="store_true", help="print one JSON object")
    usage.set_defaults(func=lambda args: cmd_usage(args, ctx.database))


def summarise(by: str, groups: list[dict[str, Any]], machine_seconds: list[dict[str, Any]],
              prices: dict[str, float]) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of the report (one per group, ``by`` naming the key column) and the machine types found
    without a price. ``groups``: the ``usage_by`` rows; ``machine_seconds``: ``vm_seconds_by_machine``."""
    usd: dict[Any, float | None] = {}
    unpriced: set[str] = set()
    for row in machine_seconds:
        price = prices.get(row["machine_type"]) if row["machine_type"] else None
        if price is None:
            unpriced.add(row["machine_type"] or "(unknown)")
        known = usd.get(row["key"], 0.0)
        usd[row["key"]] = None if price is None or known is None else known + float(row["vm_seconds"]) / 3600 * price
    rows = []
    for group in groups:
        cost = usd.get(group["key"])
        rows.append({by: group["key"] if group["key"] is not None else "(none)", "jobs": int(group["jobs"]),
                     "attempts": int(group["attempts"]), "gpu_hours": round(float(group["gpu_seconds"]) / 3600, 3),
                     "vm_hours": round(float(group["vm_seconds"]) / 3600, 3),
                     "est_usd": round(cost, 2) if cost is not None else None})
    return rows, sorted(unpriced)


def add_fleet(rows: list[dict[str, Any]], total: dict[str, Any], fleet: list[dict[str, Any]],
              machine_types: dict[str, str], prices: dict[str, float]) -> list[str]:
    """Per region, the fleet's VM-hours (boot and idle included) and their estimate next to the
    jobs' (``fleet_by_region`` rows; ``machine_types``: cluster -> machine type as configured now).
    A region with VMs but no attempt gets a row of its own. Returns the clusters without a price."""
    by_region = {row["region"]: row for row in rows}
    for seen in fleet:
        if seen["region"] not in by_region:
            by_region[seen["region"]] = {"region": seen["region"], "jobs": 0, "attempts": 0, "gpu_hours": 0.0,
                                         "vm_hours": 0.0, "est_usd": 0.0}
            rows.append(by_region[seen["region"]])
    for target in [*rows, total]:
        target.update(fleet_vm_hours=0.0, fleet_est_usd=0.0)
    unpriced: set[str] = set()
    for seen in fleet:
        hours = float(seen["vm_seconds"]) / 3600
        price = prices.get(machine_types.get(seen["cluster"], ""))
        if price is None:
            unpriced.add(seen["cluster"])
        for target in (by_region[seen["region"]], total):
            target["fleet_vm_hours"] += hours
            known = target["fleet_est_usd"]
            target["fleet_est_usd"] = None if price is None or known is None else known + hours * price
    for target in [*rows, total]:
        target["fleet_vm_hours"] = round(target["fleet_vm_hours"], 3)
        if target["fleet_est_usd"] is not None:
            target["fleet_est_usd"] = round(target["fleet_est_usd"], 2)
    rows.sort(key=lambda row: row["region"])
    return sorted(unpriced)


def collect(session, by: str, since: datetime, now: datetime, prices: dict[str, float],
            machine_types: dict[str, str]) -> dict[str, Any]:
    """Everything ``zen usage`` prints, as one JSON-able object (``machine_types``: cluster -> machine
    type as configured, for the fleet's VMs)."""
    from zen.store import usage

    rows, unpriced = summarise(by, usage.run(session, "usage_by", by=by, since=since),
                               usage.run(session, "vm_seconds_by_machine", by=by, since=since), prices)
    totals, _ = summarise("total", usage.run(session, "usage_by", by="total", since=since),
                          usage.run(session, "vm_seconds_by_machine", by="total", since=since), prices)
    total = totals[0] if totals else {"total": "total", "jobs": 0, "attempts": 0, "gpu_hours": 0.0,
                                      "vm_hours": 0.0, "est_usd": 0.0}
    total.pop("total")
    report = {"since": since.isoformat(), "by": by, "groups": rows, "total": total,
              "unpriced_machine_types": unpriced}
    if by == "region":
        fleet = usage.run(session, "fleet_by_region", since=since, now=now)
        report["unpriced_clusters"] = add_fleet(rows, total, fleet, machine_types, prices)
    return report


def cmd_usage(args, db: Callable[[], Any]) -> int:
    from zen.core.config import load_config
    from zen.store.migrate import has_table

    config = load_config()
    since = args.since or datetime.now(timezone.utc) - DEFAULT_SINCE
    database = db()
    try:
        with database.transaction() as session:
            if not has_table(session, "attempt_usage"):
                raise CliError("the database has no usage table yet: run zen db migrate")
            report = collect(session, args.by, since, datetime.now(timezone.utc), config.pricing.usd_per_vm_hour,
                             {cluster.name: cluster.machine_type for cluster in config.clusters})
    finally:
        database.close()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    rows = report["groups"] + [{args.by: "TOTAL", **report["total"]}]
    columns = (args.by,) + COLUMNS + (FLEET_COLUMNS if args.by == "region" else ())
    print(f"attempts that ended since {since.astimezone():%Y-%m-%d %H:%M %Z}, by {args.by}")
    print_table([{k: ("unpriced" if k.endswith("usd") and v is None else v) for k, v in row.items()} for row in rows],
                columns)
    if args.by == "region":
        print("fleet: every VM the scaling passes saw in the window, boot and idle included")
    if report["unpriced_machine_types"] or report.get("unpriced_clusters"):
        unpriced = report["unpriced_machine_types"] + [f"cluster {c}" for c in report.get("unpriced_clusters", [])]
        print(f"no price for {', '.join(unpriced)}: set pricing.usd_per_vm_hour (docs/reference/configuration.md)")
    return 0
