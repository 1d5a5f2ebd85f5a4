"""The structured log events operators count: one place for their names, fields and helpers.

``terraform/monitoring.tf`` builds its log-based metrics from exactly these events and fields, and
``zen stats`` computes the same figures from Postgres under the same names (``METRICS``); the metrics
and why counts are at least once: docs/reference/metrics.md."""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:
    from datetime import datetime

    from zen.store.db import Database
    from zen.core.models import Job
    from zen.scaling.model import ClusterSnapshot, Plan

EVENT = "event"  # the field naming the event on every line below

JOB_STATUS_CHANGED = "job.status_changed"  # one per job status change
MESSAGE_REJECTED = "message.rejected"  # one per rejected message (redeliveries included)
SCALING_DECISION = "scaling.decision"  # one per decision of a scaling pass
MIG_ERROR = "mig.error"  # one per MIG creation error a pass reads (stockout, quota, ...)
FLEET_VMS = "fleet.vms"  # per pass: VMs of one (cluster, region) in one state
SCALING_REGION = "scaling.region"  # per pass: is this (cluster, region) blocked (stocked out)
SCALING_CLUSTER = "scaling.cluster"  # per pass: a cluster's queue and whether every region is blocked
JOBS_COUNT = "jobs.count"  # per scale tick: a cluster's jobs in one status still in flight
OUTBOX_BACKLOG = "outbox.backlog"  # per scale tick: unsent outbox rows and the oldest one's age
SCALE_TICK = "scale_tick.done"  # per scale tick that ran (not skipped)
GANGS_WAITING = "gangs.waiting"  # per scale tick: a cluster's gangs waiting for their last node (zen.core.gang)

# The fields each event carries (besides ``event``, ``severity``, ``message``, ``time``, ``logger``).
FIELDS: dict[str, tuple[str, ...]] = {
    JOB_STATUS_CHANGED: ("job_id", "cluster", "region", "vm", "attempt", "from_status", "to_status",
                         "time_to_start_s"),
    MESSAGE_REJECTED: ("source", "message_id", "job_id", "reason", "reason_class"),
    SCALING_DECISION: ("cluster", "region", "action", "count", "vm", "reason"),
    MIG_ERROR: ("cluster", "region", "kind", "instance"),
    FLEET_VMS: ("cluster", "region", "state", "count"),
    SCALING_REGION: ("cluster", "region", "blocked"),
    SCALING_CLUSTER: ("cluster", "queued_jobs", "oldest_queued_s", "blocked_regions", "regions", "stocked_out"),
    JOBS_COUNT: ("cluster", "status", "count"),
    OUTBOX_BACKLOG: ("rows", "oldest_s"),
    SCALE_TICK: ("relayed", "swept", "republished", "widened"),
    GANGS_WAITING: ("cluster", "gangs", "nodes"),
}

# The metrics (log-based in Cloud Monitoring: logging.googleapis.com/user/<name>; rows of `zen stats`).
METRICS = {
    "zen_jobs": "jobs per cluster in each status still in flight (PENDING .. STOPPING)",
    "zen_job_status_changes": "job status changes, by cluster and new status",
    "zen_time_to_start": "seconds from submission to running, by cluster and region",
    "zen_vms": "VMs per (cluster, region) by state (BOOTING, IDLE, BUSY, DELETING)",
    "zen_mig_errors": "MIG creation errors by cluster, region and kind (STOCKOUT, QUOTA, ...)",
    "zen_region_blocked": "1 while a (cluster, region) is blocked after a stockout",
    "zen_cluster_stocked_out": "1 while every pool (region x model) of a cluster is blocked and jobs wait",
    "zen_oldest_queued": "age in seconds of a cluster's oldest QUEUED job",
    "zen_scaling_decisions": "scaling decisions by cluster and action",
    "zen_rejected_messages": "rejected messages by source and reason class",
    "zen_lost_attempts": "attempts whose VM went silent (LOST), by cluster",
    "zen_outbox_backlog_age": "age in seconds of the oldest unsent outbox row",
    "zen_gangs_waiting": "multi-node jobs waiting for their last node, per cluster (nodes: the VMs they hold meanwhile)",
    "zen_scale_ticks": "scale ticks that ran",
}

VM_STATES = ("BOOTING", "IDLE", "BUSY", "DELETING")
REASON_CLASSES = ("malformed", "unknown", "forbidden", "data")
# Reason texts by class, matched at their start (see jobs.py, events.py, lifecycle.py, store/db.py).
_CLASSES = (
    ("data", re.compile(r"the database refused the data|a value cannot be sent to the database")),
    ("unknown", re.compile(r"unknown (job|cluster|queue)|no cluster has|no queue for user|none of the GPU types")),
    ("forbidden", re.compile(
        r"transition |job_id \S+ is already used|regions \[.*\] are not used|max_\w+ \d+ is above the limit"
        # a job id reused between jobs and arrays (zen.jobs.service, zen.jobs.arrays)
        r"|job_id \S+ is an array's id|job_id \S+ is already (a job's|an array's)|job_id \S+, a task's id of array "
        r"|job_id \S+ \(task \d+ of array \S+\) is already used"
        r"|VM \S+ is being scaled down|VM \S+ in region|stale attempt|heartbeat for attempt|\S+ reports "
        r"|job is not admitted|job is already|queue \S+ has no quota|the job needs \d+ GPUs"
        # who is asking (zen.adapters.submitters, zen.jobs.authorization): a proof or a rule refused it
        r"|the message carries no zen_auth|the zen_auth token|the request says user_id|\S+ may not (submit|stop) "
        r"|priority -?\d+ is above queue"
        r"|a job (of queue \S+ )?\(priority -?\d+\) waits")),  # a claim outranked (zen.jobs.claims.outranked): ordinary work
)


def reason_class(reason: str) -> str:
    """malformed (the message cannot be read or validated), unknown (names a job or cluster Zen does
    not know), forbidden (valid, but not allowed now: limits, reuse, transitions, stale attempts),
    data (Postgres refused a value)."""
    for name, pattern in _CLASSES:
        if pattern.match(reason):
            return name
    return "malformed"


class Quiet:
    """Which of the gauge lines (``fleet.vms``, ``scaling.region``, ``scaling.cluster``, ``jobs.count``,
    ``outbox.backlog``) a pass or tick writes: a series is written while it shows activity (a non-zero
    count, a blocked region, queued jobs, a backlog), when its value changed since this process last wrote
    it, and at least every ``refresh_s`` (so the metric keeps a point at rest); an idle tick so writes only
    its ``scale_tick.done`` line. Kept per process: a new function instance writes every series once."""

    REFRESH_S = 300.0

    def __init__(self, refresh_s: float = REFRESH_S, clock: Callable[[], float] = time.monotonic):
        self._refresh_s, self._clock = refresh_s, clock
        self._written: dict[tuple[Any, ...], tuple[tuple[Any, ...], float]] = {}

    def due(self, event: str, key: tuple[Any, ...], value: tuple[Any, ...], active: bool) -> bool:
        now, last = self._clock(), self._written.get((event, *key))
        if active or last is None or last[0] != value or now - last[1] >= self._refresh_s:
            self._written[(event, *key)] = (value, now)
            return True
        return False


ALWAYS = None  # log_pass / log_tick without a Quiet: every line, every time (the simulator's reports)


def emit(logger: logging.Logger, event: str, message: str, level: int = logging.INFO, **fields: Any) -> None:
    """One event line; its fields must be exactly the event's ``FIELDS``."""
    assert set(fields) == set(FIELDS[event]), (event, sorted(fields))
    logger.log(level, message, extra={EVENT: event, **fields})


def log_changes(logger: logging.Logger, before: Job, after: Job, changes: Iterable[Any], from_status: Any) -> None:
    """One line per status change of a job (``changes``: ``lifecycle.Change``), as its history
    records it (a LOST line names the lost attempt and its VM); the change that starts an attempt
    carries the seconds from submission to its start."""
    previous = from_status
    wait = None  # on the first change of the decision that starts the attempt (RUNNING, or a quick end)
    if before.started_at is None and after.started_at is not None:
        wait = max((after.started_at - after.submitted_at).total_seconds(), 0.0)
    for change in changes:
        requeued = change.to.value == "QUEUED" and previous is not None and previous.value == "LOST"
        emit(logger, JOB_STATUS_CHANGED, f"job {change.to.value.lower()}", job_id=after.job_id,
             cluster=after.cluster, region=after.region or before.region, vm=after.vm or before.vm,
             attempt=after.attempt if requeued else before.attempt,
             from_status=previous.value if previous else None, to_status=change.to.value, time_to_start_s=wait)
        previous, wait = change.to, None


def stocked_out_now(queued: int, blocked: int, pools: int) -> int:
    """``zen_cluster_stocked_out``: 1 while jobs wait and ``blocked`` is every one of the cluster's ``pools``
    (its regions x provisioning models, ``zen.core.provisioning``: with one model, its regions), else 0."""
    return int(queued > 0 and blocked == pools)


def log_pass(logger: logging.Logger, snapshot: ClusterSnapshot, plan: Plan, quiet: Quiet | None = ALWAYS) -> None:
    """What a scaling pass saw and left: MIG errors, VMs by state, blocked regions, the queue (the gauges as
    ``quiet`` lets through)."""
    due = quiet.due if quiet is not None else (lambda event, key, value, active: True)
    cluster = snapshot.cluster.name
    for error in snapshot.errors:
        if error.detail is not None and error.instance is None:
            continue  # a quota read before asking, not an error Compute reported
        seen = getattr(snapshot.memory.get(error.region), "seen_errors_until", None)
        if seen is not None and error.at <= seen:
            continue  # counted by an earlier pass
        emit(logger, MIG_ERROR, f"MIG error {error.kind.value}", logging.WARNING, cluster=cluster,
             region=error.region, kind=error.kind.value, instance=error.instance)
    for region in snapshot.cluster.regions:
        for state in VM_STATES:
            count = sum(1 for vm in snapshot.vms if vm.region == region and vm.phase.value == state)
            if due(FLEET_VMS, (cluster, region, state), (count,), count > 0):
                emit(logger, FLEET_VMS, "fleet", cluster=cluster, region=region, state=state, count=count)
    memory = {**snapshot.memory, **plan.memory}
    blocked = [r for r in snapshot.cluster.regions
               if (until := getattr(memory.get(r), "blocked_until", None)) is not None and until > snapshot.now]
    for region in snapshot.cluster.regions:
        if due(SCALING_REGION, (cluster, region), (region in blocked,), region in blocked):
            emit(logger, SCALING_REGION, "region blocked" if region in blocked else "region open",
                 cluster=cluster, region=region, blocked=int(region in blocked))
    groups = snapshot.demand_groups()
    queued = sum(g.count for g in groups)
    # The oldest QUEUED job, demand or not: one no pool serves any longer (its cluster changed) waits for ever.
    every = [snapshot.oldest_queued] if snapshot.oldest_queued is not None else []
    oldest = min([g.oldest for g in groups] + every, default=None)
    stocked_out = stocked_out_now(queued, len(blocked), len(snapshot.cluster.regions))
    if not due(SCALING_CLUSTER, (cluster,), (queued, len(blocked), len(snapshot.cluster.regions)), oldest is not None):
        return
    emit(logger, SCALING_CLUSTER, "every region blocked while jobs wait" if stocked_out else "cluster queue",
         logging.WARNING if stocked_out else logging.INFO, cluster=cluster, queued_jobs=queued,
         oldest_queued_s=(snapshot.now - oldest).total_seconds() if oldest else 0.0,
         blocked_regions=len(blocked), regions=len(snapshot.cluster.regions), stocked_out=stocked_out)


def log_tick(logger: logging.Logger, db: Database, clusters: Iterable[str], now: datetime, report: Any,
             quiet: Quiet | None = ALWAYS) -> None:
    """After a scale tick: jobs in flight per cluster and status, the outbox backlog (as ``quiet`` lets
    them through), the tick itself. A failure reading the figures only logs: the tick's work is done, and its line is
    written."""
    due = quiet.due if quiet is not None else (lambda event, key, value, active: True)
    from zen.store import stats

    try:
        with db.transaction() as session:
            backlog = stats.outbox_backlog(session, now)
            counts = {(r["cluster"], r["status"]): r["jobs"] for r in stats.active_jobs(session)}
            gangs = {r["cluster"]: r for r in stats.run(session, "gangs_waiting")}
    except Exception as exc:  # noqa: BLE001 - figures are best effort; the next tick reports again
        logger.warning("could not read the tick's figures", extra={"error": str(exc)})
        _tick_done(logger, report)  # the tick ran: "the scale tick is not running" must not fire for it
        return
    for cluster in sorted(set(clusters) | {c for c, _ in counts}):
        for status in stats.ACTIVE_STATUSES:
            count = counts.get((cluster, status), 0)
            if due(JOBS_COUNT, (cluster, status), (count,), count > 0):
                emit(logger, JOBS_COUNT, "jobs", cluster=cluster, status=status, count=count)
        waiting = gangs.get(cluster) or {"gangs": 0, "nodes": 0}
        if due(GANGS_WAITING, (cluster,), (waiting["gangs"], waiting["nodes"]), waiting["gangs"] > 0):
            emit(logger, GANGS_WAITING, "gangs waiting for their last node", cluster=cluster, gangs=waiting["gangs"],
                 nodes=waiting["nodes"])
    if due(OUTBOX_BACKLOG, (), (backlog["rows"],), backlog["rows"] > 0):
        emit(logger, OUTBOX_BACKLOG, "outbox backlog", **backlog)
    _tick_done(logger, report)


def _tick_done(logger: logging.Logger, report: Any) -> None:
    emit(logger, SCALE_TICK, "scale tick done", relayed=report.relayed, swept=report.swept,
         republished=report.republished, widened=report.widened)
