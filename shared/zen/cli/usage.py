"""``zen usage [--since AGE|DATE] [--by user|queue|region] [--json]``: GPU-hours, VM-hours and what they
cost per user, queue or region, read from ``attempt_usage`` (``zen.store.usage``), with the fleet's
VM-hours ``--by region``. Each attempt is billed per second of its share of its VM at the price of its
machine type in the region and provisioning model it ran in, as its VM was billed (kept when it ended); each VM of the fleet
as GCE bills it (a one-minute minimum, per second after: ``Pricer``). What is counted, the window and the prices: docs/explanations/accounting.md.
A read command: it never starts or creates a database (``zen.cli.kit.database``).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable

from zen.cli.kit import CliError, Context, print_table

DEFAULT_SINCE = timedelta(days=7)
COLUMNS = ("jobs", "attempts", "gpu_hours", "vm_hours", "usd")
FLEET_COLUMNS = ("fleet_vm_hours", "fleet_usd")


def register(sub, ctx: Context) -> None:
    from zen.store.usage import GROUPINGS

    usage = sub.add_parser("usage", help="GPU-hours, VM-hours and their cost per user, queue or region")
    usage.add_argument("--since", type=ctx.since, metavar="AGE|DATE",
                       help="attempts that ended since: an age (24h, 7d) or a date (2026-11-20); default 7d")
    usage.add_argument("--by", choices=GROUPINGS, default="user", help="group by (default: user)")
    usage.add_argument("--json", action="store_true", help="print one JSON object")
    usage.set_defaults(func=lambda args: cmd_usage(args, ctx.database))


class Unpriced(str):
    """One thing ``zen usage`` found no price for, as the report names it, with what the note says of it:
    ``override``, the ``pricing.overrides`` entry that would price it; else ``why`` no price set now would (its
    price was not kept when it ended, its machine type or model is not known, or no configured cluster has its
    machine type in its region, which ``pricing.overrides`` refuses to name)."""

    override: str | None
    why: str

    def __new__(cls, text: str, override: str | None = None, why: str = "") -> "Unpriced":
        item = super().__new__(cls, text)
        item.override, item.why = override, why
        return item


class Pricer:
    """What attempts and VMs cost, billed as GCE bills. An attempt (an ``attempt_usage`` row): per second of its
    share of the VM, at the model and price kept as it ended (its VM's billed segment's, as the fleet's below, else
    the price then: ``zen.core.prices.AttemptPrice``); a row from
    before they were kept: today's price, the model from its VM's name as its cluster is configured now. A
    VM (the fleet): a one-minute minimum, then per second, at its pool's price when it began (else today's).
    GCE's minimum is a VM's, met by its boot before its first job: not charged again for each job it runs.
    Remembers what it found unpriced (``Unpriced``: what would price it, or why nothing would); never guesses a model (a row of a cluster no
    longer configured, without one kept, is unpriced)."""

    def __init__(self, table, clusters: dict[str, Any]):
        self.table, self.clusters = table, clusters
        self.unpriced: set[Unpriced] = set()
        self.nameable = {(c.machine_type, region) for c in clusters.values() for region in c.regions}
        self.kept_vms: dict[tuple[str, str], tuple[str, str | None]] = {}  # (cluster, VM) -> machine type, model
        self.kept_types: dict[str, str] = {}  # cluster -> the machine type its latest attempt recorded

    def learn(self, attempts: list[dict[str, Any]]) -> None:
        """What ``attempts`` (``attempt_seconds`` rows, in the order they ended) recorded of their VMs: each
        VM's machine type and, for an attempt on one VM, the model it ran as; and each cluster's latest machine
        type. ``vm`` prices a VM of a cluster no longer configured by them."""
        for row in attempts:
            if row.get("machine_type"):
                single = row.get("model") if float(row["vm_share"]) <= 1 else None  # a gang's names its nodes' all
                earlier = self.kept_vms.get((row["cluster"], row["vm"]), ("", None))[1]
                self.kept_vms[(row["cluster"], row["vm"])] = (row["machine_type"], single or earlier)
                self.kept_types[row["cluster"]] = row["machine_type"]

    def model(self, row: dict[str, Any]) -> str | None:
        """The provisioning model an attempt ran as (None: not known)."""
        from zen.core.prices import model_of_vm

        if row.get("model"):
            return row["model"]
        config = self.clusters.get(row["cluster"])
        return model_of_vm(config, row["vm"], row["region"]) if config is not None and row["region"] else None

    def attempt(self, row: dict[str, Any], seconds: float) -> float | None:
        """What an attempt that held its VM ``seconds`` cost (None: unpriced)."""
        from zen.core.prices import billed_usd

        price = row.get("usd_per_hour")
        gang = row.get("model") and float(row["vm_share"]) > 1  # its nodes' models: which node ran as which, not kept
        region = row.get("region") or "(no region)"
        if price is None and gang:  # no price when it ended, and one model for every node would be a guess
            self.unpriced.add(Unpriced(
                f"{row.get('machine_type') or '(unknown)'} in {region} (a multi-node attempt's nodes as "
                f"{row['model']})", why="no price was known for one of its nodes' models when "
                "it ended, and which model each node ran as is not recorded, so no price set now applies to it"))
            return None
        if price is None and not row.get("machine_type"):  # a cluster configured again since: a guess too
            self.unpriced.add(Unpriced(
                f"an attempt of cluster {row['cluster']} in {region}", why="it ended while its cluster was not "
                "configured, so neither its machine type nor its price was recorded; rename or remove a cluster "
                "only while no job runs on it"))
            return None
        if price is None:  # its own model's price today (a row from before prices were kept: the VM name's model)
            price = self._price(row["cluster"], row["machine_type"], row["region"], self.model(row))
        return None if price is None else billed_usd(seconds, float(price), minimum=False) * float(row["vm_share"])

    def vm(self, cluster: str, region: str | None, name: str, seconds: float, began: bool = True,
           model: str | None = None, usd_per_hour: float | None = None, before: float = 0.0) -> float | None:
        """What a VM of ``cluster`` seen for ``seconds`` cost (None: unpriced). ``began``: its RUNNING began in
        the window, which bears GCE's one-minute minimum (even for a VM one scaling pass alone saw RUNNING, 0 s
        between its first and last sight); else the minute was paid before the window (``before``: its seconds
        RUNNING there), and the window bears what its seconds add to the VM's bill: none of those the minute covers.
        ``model``: the one its pool had when it was seen (None: read from its name, today's configuration).
        A VM its own attempts in the window recorded a machine type of is priced at it (its cluster's may have changed
        since). A VM of a cluster since removed from the configuration cost what GCE billed all the same: it is priced
        at the machine type its own attempts recorded (``learn``), else its cluster's latest, and the model its
        pool had when seen, else the one its own attempts recorded; with neither machine type nor model known
        it is unpriced, and the fleet's dollars it is in are a lower bound (``add_fleet``). ``usd_per_hour``: the
        price its pool had when the scaling passes first saw it billed (migration 0056), which GCE billed it at;
        None (seen before, or unpriced then): today's, as above."""
        if usd_per_hour is not None:
            return self._billed(seconds, float(usd_per_hour), began, before)
        # Its own attempts' machine type first: the cluster's may have changed since it ran (GCE billed what ran).
        machine_type = self.kept_vms.get((cluster, name), (None, None))[0]
        if cluster not in self.clusters:
            machine_type, kept_model = self.kept_vms.get((cluster, name), (self.kept_types.get(cluster), None))  # (removed)
            model = model or kept_model
            if machine_type is None:
                self.unpriced.add(Unpriced(
                    f"VMs of cluster {cluster} in {region or '(no region)'}", why="the cluster was removed from "
                    "the configuration and no attempt of it that ended in the window recorded its machine type; "
                    "a --since that takes in one of its attempts prices them"))
                return None
        price = self._price(cluster, machine_type, region, self.model({"cluster": cluster, "vm": name,
                                                                      "region": region, "model": model}))
        return None if price is None else self._billed(seconds, price, began, before)

    @staticmethod
    def _billed(seconds: float, usd_per_hour: float, began: bool, before: float = 0.0) -> float:
        """A VM's ``seconds`` in the window at ``usd_per_hour``: GCE's one-minute minimum where its RUNNING ``began``;
        else what they add to the ``before`` seconds billed before the window (a VM RUNNING 10 s before it and 20 s
        in it cost GCE's minute, which the window where it began bears: none of it in this one)."""
        from zen.core.prices import BILLING_MINIMUM_S, billed_seconds, billed_usd

        if began:
            return billed_usd(max(seconds, BILLING_MINIMUM_S), usd_per_hour)
        if before <= 0:
            return billed_usd(seconds, usd_per_hour, minimum=False)
        added = billed_seconds(before + seconds) - billed_seconds(before)
        return max(0, added) * usd_per_hour / 3600.0

    def _price(self, cluster: str, machine_type: str | None, region: str | None, model: str | None) -> float | None:
        config = self.clusters.get(cluster)
        machine_type = machine_type or (config.machine_type if config else None)
        found = self.table.lookup(machine_type, region, model) if machine_type and region and model else None
        if found is None:
            self.unpriced.add(self._missing(cluster, machine_type, region, model))
            return None
        return found.usd_per_hour

    def _missing(self, cluster: str, machine_type: str | None, region: str | None, model: str | None) -> Unpriced:
        """What lacks a price, and whether a ``pricing.overrides`` entry would price it."""
        where = f"{machine_type or '(unknown)'} in {region or '(no region)'}"
        if not region:
            return Unpriced(f"{where} (region unknown)", why="its region was not recorded")
        if not machine_type or not model:
            return Unpriced(f"{where} ({model or f'model unknown: cluster {cluster} is not configured'})",
                            why="it was recorded before Zen kept provisioning models, and its cluster is no "
                                "longer configured to read the model from its VM's name")
        if (machine_type, region) not in self.nameable:
            return Unpriced(f"{where} ({model})", why=f"no configured cluster has {machine_type} in {region}, and "
                            "pricing.overrides takes only configured clusters' machine types and regions")
        return Unpriced(f"{where} ({model})", override=f"pricing.overrides.{machine_type}.{region}.{model}")


def summarise(by: str, groups: list[dict[str, Any]], attempts: list[dict[str, Any]],
              pricer: Pricer) -> list[dict[str, Any]]:
    """Rows of the report, one per group (``by`` naming the key column): ``groups`` are the ``usage_by``
    rows, ``attempts`` the ``attempt_seconds`` rows, each billed by ``pricer``; a group with an unpriced
    attempt has ``usd`` None, never a guess."""
    usd: dict[Any, float | None] = {}
    for row in attempts:
        cost = pricer.attempt(row, float(row["seconds"]))
        known = usd.get(row["key"], 0.0)
        usd[row["key"]] = None if cost is None or known is None else known + cost
    rows = []
    for group in groups:
        cost = usd.get(group["key"])
        rows.append({by: group["key"] if group["key"] is not None else "(none)", "jobs": int(group["jobs"]),
                     "attempts": int(group["attempts"]), "gpu_hours": round(float(group["gpu_seconds"]) / 3600, 3),
                     "vm_hours": round(float(group["vm_seconds"]) / 3600, 3),
                     "usd": round(cost, 2) if cost is not None else None})
    return rows


def add_fleet(rows: list[dict[str, Any]], total: dict[str, Any], fleet: list[dict[str, Any]],
              pricer: Pricer) -> None:
    """Per region, the fleet's VM-hours (boot and idle included) and their cost next to the jobs'
    (``fleet_by_region`` rows, one per VM; each VM billed by ``pricer``: its cluster's machine type as
    configured now, or as its attempts recorded it once the cluster is removed). A region with VMs but no
    attempt gets a row of its own. Where some VMs have no price, ``fleet_usd`` is None (not the whole cost)
    and the row says what is known: ``fleet_usd_at_least``, the priced VMs' dollars, and
    ``fleet_unpriced_vm_hours``, the VM-hours without a price (``pricer.unpriced`` says which and why)."""
    by_region = {row["region"]: row for row in rows}
    for seen in fleet:
        if seen["region"] not in by_region:
            by_region[seen["region"]] = {"region": seen["region"], "jobs": 0, "attempts": 0, "gpu_hours": 0.0,
                                         "vm_hours": 0.0, "usd": 0.0}
            rows.append(by_region[seen["region"]])
    for target in [*rows, total]:
        target.update(fleet_vm_hours=0.0, fleet_usd=0.0)
    unpriced: dict[int, float] = {}  # id of a row (or the total) -> its VM-hours without a price
    for seen in fleet:
        seconds = float(seen["vm_seconds"])
        cost = pricer.vm(seen["cluster"], seen["region"], seen["name"], seconds,
                         bool(seen.get("began_in_window", True)), seen.get("model"), seen.get("usd_per_hour"),
                         float(seen.get("before_window") or 0.0))
        hours = seconds / 3600
        for target in (by_region[seen["region"]], total):
            target["fleet_vm_hours"] += hours
            if cost is None:
                unpriced[id(target)] = unpriced.get(id(target), 0.0) + hours
            else:
                target["fleet_usd"] += cost
    for target in [*rows, total]:
        target.update(fleet_vm_hours=round(target["fleet_vm_hours"], 3), fleet_usd=round(target["fleet_usd"], 2))
        if id(target) in unpriced:
            target.update(fleet_usd=None, fleet_usd_at_least=target["fleet_usd"],
                          fleet_unpriced_vm_hours=round(unpriced[id(target)], 3))
    rows.sort(key=lambda row: row["region"])


def collect(session, by: str, since: datetime, now: datetime, pricer: Pricer) -> dict[str, Any]:
    """Everything ``zen usage`` prints, as one JSON-able object."""
    from zen.store import usage

    rows = summarise(by, usage.run(session, "usage_by", by=by, since=since),
                     usage.run(session, "attempt_seconds", by=by, since=since), pricer)
    attempts = usage.run(session, "attempt_seconds", by="total", since=since)  # in the order they ended
    totals = summarise("total", usage.run(session, "usage_by", by="total", since=since), attempts, pricer)
    total = totals[0] if totals else {"total": "total", "jobs": 0, "attempts": 0, "gpu_hours": 0.0,
                                      "vm_hours": 0.0, "usd": 0.0}
    total.pop("total")
    report: dict[str, Any] = {"since": since.isoformat(), "by": by, "groups": rows, "total": total}
    if by == "region":
        pricer.learn(attempts)
        add_fleet(rows, total, usage.run(session, "fleet_by_region", since=since, now=now), pricer)
    report["unpriced"] = sorted(pricer.unpriced)
    return report


def cmd_usage(args, db: Callable[[], Any]) -> int:
    from zen.core.config import load_config
    from zen.store.migrate import has_table
    from zen.store.prices import current
    from zen.store.usage import read_snapshot

    config = load_config()
    since = args.since or datetime.now(timezone.utc) - DEFAULT_SINCE
    database = db()
    try:
        with database.transaction() as session:
            read_snapshot(session)
            if not has_table(session, "attempt_usage"):
                raise CliError("the database has no usage table yet: run zen db migrate")
            pricer = Pricer(current(session, config.pricing), {c.name: c for c in config.clusters})
            report = collect(session, args.by, since, datetime.now(timezone.utc), pricer)
    finally:
        database.close()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    rows = report["groups"] + [{args.by: "TOTAL", **report["total"]}]
    columns = (args.by,) + COLUMNS + (FLEET_COLUMNS if args.by == "region" else ())
    print(f"attempts that ended since {since.astimezone():%Y-%m-%d %H:%M %Z}, by {args.by}")
    print_table(shown_unpriced(rows), columns)
    print("usd: each attempt per second of its share of its VM, at the price its VM was billed at (its region's "
          "and provisioning model's)")
    if args.by == "region":
        print("fleet: every VM the scaling passes saw in the window, boot and idle included, billed as GCE bills "
              "(one-minute minimum, per second after) at its pool's price when it began; its time in the window only, while usd counts "
              "each attempt whole: one that began before the window makes usd exceed fleet_usd (fleet_usd - usd is no "
              "idle cost then: widen --since)")
    if report["unpriced"]:
        print(unpriced_note(report["unpriced"]))
    return 0


def shown_unpriced(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as printed: a dollar column with no price says ``unpriced`` (a blank reads as nothing to pay);
    the fleet's dollars of a row with some VMs unpriced say what is known: ``12.34 + 2.5 VM-h unpriced``."""
    shown = []
    for row in rows:
        cells = {k: ("unpriced" if k.endswith("usd") and v is None else v) for k, v in row.items()}
        if "fleet_usd_at_least" in row:
            cells["fleet_usd"] = f"{row['fleet_usd_at_least']:.2f} + {row['fleet_unpriced_vm_hours']} VM-h unpriced"
        shown.append(cells)
    return shown


def unpriced_note(unpriced: Iterable[str]) -> str:
    """What the report says of what it found no price for (``Pricer.unpriced``): the ``pricing.overrides``
    entries that would price some, and why no price set now would price the others."""
    items = list(unpriced)
    settable = [item for item in items if getattr(item, "override", None)]
    lines = [f"no price for {item}: {getattr(item, 'why', '') or 'no source priced it'}"
             for item in items if item not in settable]
    if settable:
        entries = ", ".join(sorted({getattr(item, "override") for item in settable}))
        lines.insert(0, f"no price for {', '.join(settable)}: set {entries} (USD per VM-hour; "
                        "docs/reference/configuration.md#prices)")
    return "\n".join(lines)
