"""What each console page shows, read with the queries and functions the ``zen`` read commands use, so a
page and its command never disagree: the job list is ``zen jobs list`` (``repository.recent_jobs``, a
keyset page at a time), a job's page ``zen jobs get`` + ``history`` + ``explain`` + the dollars of
``zen usage``, queues ``zen queues`` with each waiting job's ``zen explain`` line, clusters ``zen watch``'s
VMs per region, ``zen stats``' blocked regions, ``zen explain CLUSTER``'s decisions and ``zen clusters``'
prices, usage ``zen usage``. Every function reads in the caller's transaction and returns plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from zen.console.viewers import Viewer
from zen.core.config import ZenConfig
from zen.core.models import LOWEST_PRIORITY, Job

PAGE_SIZE = 50
WAITING_SHOWN = 20  # per queue, the waiting jobs whose reason the queues page gives


@dataclass(frozen=True)
class JobFilters:
    user: str | None = None
    queue: str | None = None
    status: str | None = None
    array: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def query(self) -> dict[str, str]:
        """The filters as query-string parameters (the next page's link keeps them)."""
        given = {"user": self.user, "queue": self.queue, "status": self.status, "array": self.array}
        out = {k: v for k, v in given.items() if v}
        if self.labels:
            out["label"] = ",".join(f"{k}={v}" for k, v in self.labels.items())
        return out


def job_list(session, viewer: Viewer, filters: JobFilters, before: tuple[datetime, str] | None,
             limit: int = PAGE_SIZE, now: datetime | None = None) -> dict[str, Any]:
    """One page of jobs the viewer may see, newest first, and the keyset of the next page (None: last)."""
    from zen.cli.kit import job_row
    from zen.store import repository

    jobs = repository.recent_jobs(session, status=filters.status, user_id=filters.user, queue=filters.queue,
                                  array_id=filters.array, labels=filters.labels, limit=limit + 1, before=before,
                                  viewer=viewer.scope)
    more = len(jobs) > limit
    jobs = jobs[:limit]
    following = (jobs[-1].submitted_at, jobs[-1].job_id) if more else None
    progress = None
    if filters.array:
        from zen.cli.records import array_progress, ctx_array_tasks

        tasks = [t for t in ctx_array_tasks(session, filters.array) if viewer.may_see(t)]
        progress = array_progress(filters.array, tasks)
    return {"rows": [job_row(j, now, timezone.utc) for j in jobs], "next": following, "progress": progress}


def array_visible(session, viewer: Viewer, array_id: str) -> bool:
    """Whether ``array_id`` names an array with a task the viewer may see (``zen explain ARRAY`` finds it so)."""
    from zen.cli.records import ctx_array_tasks

    return any(viewer.may_see(task) for task in ctx_array_tasks(session, array_id))


def job_detail(session, config: ZenConfig, job: Job) -> dict[str, Any]:
    """A job's page: what ``zen jobs get`` prints, its history, the ``zen explain`` line, its attempts and
    what each cost (``zen usage``'s pricing)."""
    from zen.cli.queues import explain_line
    from zen.cli.records import _gang_view, _what_it_runs
    from zen.store import repository

    view = {**job.public_view(), **_what_it_runs(job), **_gang_view(job, False)}  # a gang's nodes, as the CLI's
    message = view.pop("message") or ""
    fields = {k: v for k, v in view.items() if v not in (None, [], {}, "") and not (k == "retries" and v == 0)}
    attempts, total_usd = attempt_costs(session, config, job.job_id)
    return {"job": job, "fields": fields, "message": message, "history": repository.job_history(session, job.job_id),
            "why": explain_line(session, config, job), "attempts": attempts, "usd": total_usd}


def attempt_costs(session, config: ZenConfig, job_id: str) -> tuple[list[dict[str, Any]], float | None]:
    """Each attempt a VM held (``attempt_usage``), billed as ``zen usage`` bills it; the sum (None when
    one is unpriced)."""
    from zen.cli.usage import Pricer
    from zen.store import usage
    from zen.store.prices import current

    pricer = Pricer(current(session, config.pricing), {c.name: c for c in config.clusters})
    rows: list[dict[str, Any]] = []
    total: float | None = 0.0
    for row in usage.attempts_of_job(session, job_id):
        seconds = (row["ended_at"] - row["started_at"]).total_seconds()
        cost = pricer.attempt(row, seconds)
        rows.append({"attempt": row["attempt"], "vm": row["vm"], "region": row["region"], "outcome": row["outcome"],
                     "gpus": row["gpus"], "seconds": round(seconds, 1), "usd": None if cost is None else round(cost, 4)})
        total = None if cost is None or total is None else total + cost
    return rows, None if total is None else round(total, 2)


def queues(session, config: ZenConfig, viewer: Viewer, shown: int | None = None) -> list[dict[str, Any]]:
    """``zen queues``' rows, each with whether the viewer may submit to it, and the first ``shown``
    (WAITING_SHOWN) jobs waiting in it that the viewer sees (every one of a queue it belongs to, else its own),
    in the order they are served (``waiting_line``), each with its ``zen explain`` line, and how many more
    wait (``more``). A queue removed from the configuration whose jobs still hold GPUs or wait is listed after
    the configured ones with its ``note``, as ``zen queues`` lists it."""
    from zen.cli.queues import explain_line
    from zen.jobs.authorization import may_submit
    from zen.jobs.queueing import Queueing
    from zen.store.jobstore import PostgresJobTx

    rows = Queueing(config).summary(PostgresJobTx(session)) if config.queues else []
    for row in rows:
        refused = (may_submit(config, viewer.principal, row["queue"], LOWEST_PRIORITY)  # membership (max_priority -1)
                   if config.queue(row["queue"]) else f"queue {row['queue']} is not in the configuration")
        row["you_may_submit"] = refused is None
        row["why_not"] = refused
    out = []
    for name in dict.fromkeys([queue.name for queue in config.queues] + [row["queue"] for row in rows]):
        sees_jobs = viewer.sees_all or name in viewer.queues
        owner = None if sees_jobs else viewer.principal
        jobs, total = waiting_line(session, name, owner, shown or WAITING_SHOWN)
        mine = [r for r in rows if r["queue"] == name]
        note = next((r["note"] for r in mine if r.get("note")), None)
        out.append({"rows": mine, "name": name, "sees_jobs": sees_jobs, "note": note,
                    "waiting": [{"job_id": j.job_id, "user": j.user_id, "cluster": j.cluster, "status": j.status.value,
                                 "priority": j.priority, "why": explain_line(session, config, j)} for j in jobs],
                    "more": total - len(jobs)})
    return out


def waiting_line(session, queue: str, owner: str | None, limit: int) -> tuple[list[Job], int]:
    """The first ``limit`` jobs waiting in ``queue`` (``owner``'s alone when given), in the order they are
    served (the ``waiting_line`` query), and how many wait in all."""
    from zen.store.repository import job_from_row

    rows = session.run("waiting_line", queue=queue, owner=owner, limit=limit)
    return [job_from_row(r) for r in rows], (rows[0]["waiting_total"] if rows else 0)


def clusters(session, config: ZenConfig, now: datetime, decisions: int = 10) -> list[dict[str, Any]]:
    """Per cluster: VMs per region by state (``zen watch``), the regions blocked now (``zen stats``), its
    latest scaling decisions with their reasons (``zen explain CLUSTER``) and its prices (``zen clusters``)."""
    from zen.cli.clusters import price_rows
    from zen.cli.watch import vms_per_region
    from zen.store import fleet, stats
    from zen.store.prices import current

    vm_rows, _ = vms_per_region(session)
    blocked = stats.run(session, "blocked_regions", now=now)
    table = current(session, config.pricing)
    out = []
    for cluster in config.clusters:
        out.append({
            "name": cluster.name, "gpus": f"{cluster.gpu_count}x {cluster.gpu_type}", "machine": cluster.machine_type,
            "regions": list(cluster.regions), "max_vms": cluster.max_vms,
            "vms": [r for r in vm_rows if r["cluster"] == cluster.name],
            "blocked": [r for r in blocked if r["cluster"] == cluster.name],
            "decisions": [{**d, "at": utc_stamp(d["at"])}
                          for d in fleet.recent_decisions(session, cluster.name, decisions)],
            "prices": [p for p in price_rows(table, cluster) if p["used"]],
        })
    return out


def utc_stamp(moment: datetime) -> str:
    """A moment as the console's pages show it: date and time in UTC, saying so (a decision of last week is
    not taken for today's)."""
    return f"{moment.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


USAGE_WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}


def usage(session, config: ZenConfig, by: str, since: datetime, now: datetime) -> dict[str, Any]:
    """``zen usage --by BY --since SINCE``'s report."""
    from zen.cli.usage import Pricer, collect
    from zen.store.prices import current

    pricer = Pricer(current(session, config.pricing), {c.name: c for c in config.clusters})
    return collect(session, by, since, now, pricer)


def bar_chart(rows: list[dict[str, Any]], label: str, value: str, width: int = 560, bar_height: int = 22
              ) -> dict[str, Any]:
    """Geometry of a horizontal bar chart of ``rows`` (drawn as inline SVG by the template): one bar per
    row, scaled to the largest value."""
    values = [float(r.get(value) or 0.0) for r in rows]
    top = max(values, default=0.0) or 1.0
    label_w, value_w = 160, 90
    room = width - label_w - value_w
    bars = [{"label": str(r[label]), "value": v, "y": i * (bar_height + 6), "w": round(room * v / top, 1),
             "x": label_w} for i, (r, v) in enumerate(zip(rows, values))]
    return {"bars": bars, "width": width, "height": max(len(bars), 1) * (bar_height + 6), "bar_height": bar_height,
            "value_x": label_w + room + 6}
