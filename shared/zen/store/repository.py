"""Rows in and out of Postgres. This module is the only writer of ``jobs.status``.

Every write runs inside a caller's transaction (``Database.transaction()``), so a state change, its
history rows and its outbox messages commit together or not at all.
"""

from __future__ import annotations

import heapq
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from zen.core.models import Job, JobStatus, illegal_step
from zen.jobs.store import ConcurrentChange
from zen.store.encoding import to_json

if TYPE_CHECKING:  # the service needs only the interface; the driver loads in the adapter
    from zen.store.db import Session


_JOB_FIELDS = set(Job.model_fields)


def _isoformat(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def job_from_row(row: dict[str, Any]) -> Job:
    return Job.model_validate({key: value for key, value in row.items() if key in _JOB_FIELDS})


def insert_job(session: Session, job: Job) -> bool:
    """Insert a new job; False when the job_id exists already (a redelivery or a reuse)."""
    row = session.one(
        "insert_job", job_id=job.job_id, status=job.status.value, max_attempts=job.max_attempts,
        cluster=job.cluster, user_id=job.user_id, priority=job.priority, regions=to_json(job.regions),
        request=to_json(job.request), request_hash=job.request_hash, max_runtime_s=job.max_runtime_s,
        now=job.submitted_at, queue=job.queue, gpus=job.gpus, hold=job.hold,
    )
    return row is not None


def _json_or_null(value: Any) -> str | None:
    return None if value is None else to_json(value)


def get_job(session: Session, job_id: str, *, lock: bool = False) -> Job | None:
    row = session.one("lock_job" if lock else "get_job", job_id=job_id)
    return job_from_row(row) if row else None


def ids_taken(session: Session, ids: list[str]) -> list[str]:
    """Those of ``ids`` a job or an array holds, in one read."""
    return [row["id"] for row in session.run("ids_taken", ids=ids)]


def list_jobs(session: Session, *, status: str | None = None, cluster: str | None = None,
              limit: int = 1000) -> list[Job]:
    return [job_from_row(r) for r in session.run("list_jobs", status=status, cluster=cluster, limit=limit)]


def recent_jobs(session: Session, *, status: str | None = None, cluster: str | None = None,
                user_id: str | None = None, labels: dict[str, str] | None = None, since: datetime | None = None,
                limit: int = 50, queue: str | None = None, array_id: str | None = None,
                before: tuple[datetime, str] | None = None, viewer: tuple[str, list[str]] | None = None) -> list[Job]:
    """Newest first (``zen jobs list``, the console's job list). ``before``: the (submitted_at, job_id) of
    the last row of the page before; ``viewer``: (principal, its queues) when it may not see every job: its
    own jobs and each of its queues', each read through its own index from the keyset (a page at most each,
    whoever owns them), merged, a job both theirs and their queue's once. Ties of submitted_at go by job_id in
    byte order (the query's COLLATE "C"), Python's string order: the merge's, whatever the database's collation."""
    def read(**scope: str | None) -> list[dict[str, Any]]:
        return session.run("recent_jobs", status=status, cluster=cluster, user_id=user_id, since=since,
                           labels=json.dumps(labels or {}), limit=limit, queue=scope.get("queue", queue),
                           array_id=array_id, before_at=before[0] if before else None,
                           before_id=before[1] if before else None, owner=scope.get("owner"))

    if viewer is None:
        rows = read()
    else:
        principal, theirs = viewer
        reads = [read(owner=principal)] + [read(queue=name) for name in sorted(set(theirs)) if queue in (None, name)]
        merged = heapq.merge(*reads, key=lambda r: (r["submitted_at"], r["job_id"]), reverse=True)
        rows = []  # each read keeps the database's order
        for row in merged:
            if not rows or row["job_id"] != rows[-1]["job_id"]:  # a job both theirs and a queue's: its copies
                rows.append(row)  # have one key, so they come one after the other
            if len(rows) == limit:
                break
    return [job_from_row(r) for r in rows]


def active_jobs(session: Session, limit: int) -> tuple[list[Job], int]:
    """The newest ``limit`` unfinished jobs, and how many there are in all (``zen watch``)."""
    jobs = [job_from_row(r) for r in session.run("active_jobs", limit=limit)]
    return jobs, session.one_row("count_active_jobs")["n"]


def record_progress(session: Session, *, job_id: str, attempt: int, vm: str, seq: int, message: str | None,
                    now: datetime, vm_since: datetime | None = None) -> bool:
    """A RUNNING heartbeat from the VM that holds the running attempt, newer than the last: record it
    in one statement. False when the job is in any other state, or the attempt started before ``vm_since``
    (the reporting VM made after it: ``zen.core.incarnation``), and the caller decides in full."""
    return session.one("record_progress", job_id=job_id, attempt=attempt, vm=vm, seq=seq, message=message,
                       now=now, vm_since=vm_since) is not None


def save_job(session: Session, before: Job, after: Job, path: list[JobStatus], now: datetime) -> None:
    """Write ``after`` over the row, guarded by ``before``'s status and attempt.

    ``path`` is the sequence of statuses the job went through (e.g. [LOST, QUEUED]); every step must
    be in the transition table and it must end at ``after.status``.
    """
    bad = illegal_step(before.status, path)
    if bad or (path and path[-1] != after.status) or (not path and after.status != before.status):
        raise ConcurrentChange(f"illegal transition for {before.job_id}: {before.status.value} -> {path}")
    updated = session.one(
        "update_job", job_id=before.job_id, expected_status=before.status.value,
        expected_attempt=before.attempt, status=after.status.value, attempt=after.attempt, vm=after.vm,
        region=after.region, zone=after.zone, last_seq=after.last_seq,
        last_heartbeat_at=after.last_heartbeat_at, queued_at=after.queued_at, started_at=after.started_at,
        finished_at=after.finished_at, exit_code=after.exit_code, message=after.message,
        start_published_at=after.start_published_at, max_attempts=after.max_attempts,
        preempted_by=after.preempted_by, stop_reason=after.stop_reason, preemptions=after.preemptions,
        start_regions=_json_or_null(after.start_regions), widen_at=after.widen_at,
        start_vms=_json_or_null(after.start_vms), regions=to_json(after.regions), hold=after.hold,
        hold_until=after.hold_until, retries=after.retries,
        gang=_json_or_null([node.model_dump(mode="json") for node in after.gang] if after.gang else None),
        left_vms=_json_or_null(after.left_vms), heard_at=after.heard_at, fence_timeout_s=after.fence_timeout_s, now=now,
    )
    if updated is None:
        raise ConcurrentChange(f"job {before.job_id} changed under a lock")


def add_job_events(session: Session, rows: list[dict[str, Any]]) -> None:
    """History rows (``job_id, at, actor, attempt, from_status, to_status, reason``), in order."""
    if not rows:
        return
    session.run("insert_job_events", rows=json.dumps(rows, default=_isoformat))


def remember_early_stop(session: Session, job_id: str, reason: str, now: datetime,
                        principal: str | None = None) -> None:
    session.run("insert_early_stop", job_id=job_id, reason=reason, now=now, principal=principal)


def take_early_stops(session: Session, job_id: str) -> list[tuple[str, str | None]]:
    """The (reason, proven sender) of each stop that arrived before the job (one a sender), first first, consumed."""
    rows = sorted(session.run("take_early_stops", job_id=job_id), key=lambda row: row["requested_at"])
    return [(row["reason"], row["principal"]) for row in rows]


def kept_stop_names(session: Session, job_id: str) -> list[str]:
    return sorted(row["job_id"] for row in session.run("kept_stop_names", job_id=job_id))


def kept_stops_of(session: Session, job_id: str) -> list[dict[str, Any]]:
    """The stops kept for ``job_id`` (reason, principal, requested_at), the first first, not consumed."""
    return session.run("kept_stops_of", job_id=job_id)


def record_tick(session: Session, now: datetime, gap_s: float) -> datetime | None:
    """Record this tick; returns when Zen came back after its last gap of more than ``gap_s`` (None:
    none seen)."""
    session.run("lock_tick_clock")  # a probe heard before this transaction commits waits for it (probe_heard)
    row = session.one("record_tick", now=now, gap_s=float(gap_s))
    return row["back_at"] if row else None


def look_at_probe(session: Session, now: datetime, late_s: float, stale_s: float, nonce: str) -> dict[str, Any]:
    row: dict[str, Any] = session.one_row("look_at_probe", now=now, late_s=float(late_s), stale_s=float(stale_s),
                                          nonce=nonce)
    return row


def probe_heard(session: Session, nonce: str, now: datetime) -> float | None:
    session.run("lock_tick_clock")  # a tick publishing this probe before its commit: that commit first
    row = session.one("probe_heard", nonce=nonce, now=now)
    return float(row["lag_s"]) if row else None


def early_stops_of_submitted_jobs(session: Session, limit: int) -> list[str]:
    """Jobs that exist now although a stop for them was kept as unknown (it raced the submit)."""
    return [row["job_id"] for row in session.run("early_stops_of_submitted_jobs", limit=limit)]


def job_history(session: Session, job_id: str) -> list[dict[str, Any]]:
    return session.run("job_history", job_id=job_id)


def list_rejections(session: Session) -> list[dict[str, Any]]:
    return session.run("list_rejected")


def latest_rejection(session: Session, job_id: str, message_id: str | None = None) -> dict[str, Any] | None:
    """The newest refusal of ``job_id`` (of that message only, with ``message_id``)."""
    return session.one("rejections_of_job", job_id=job_id, message_id=message_id)


def upsert_vm(session: Session, *, name: str, cluster: str, region: str, zone: str, state: str,
              job_id: str | None, attempt: int | None, seq: int, sent_at: datetime, now: datetime,
              jobs: list[dict[str, Any]] | None = None, cached_inputs: list[str] | None = None,
              images: list[str] | None = None, heard_at: datetime | None = None,
              created: datetime | None = None) -> str | None:
    """Record a VM heartbeat (``jobs``: every attempt it holds, from a VM that may hold several;
    ``cached_inputs`` / ``images``: what its warm cache holds): the state the VM had before ('' for a
    VM not heard from before), or None when the heartbeat is older than what is recorded (out of order).
    Older, its ``heard_at`` (when it was sent, no later than now) still counts as hearing the VM: an agent whose
    clock ran ahead and was stepped back across a restart draws lower seqs until its clock catches up, and its VM,
    heard every minute, looked silent and was deleted. A heartbeat delivered late was sent long ago: no later sight.
    In a transaction, the row stays locked to its end: two heartbeats of one VM at once see each other.
    From the VM created at ``created`` that said RETIRED (``vm_retired_as``), any state is recorded as RETIRED: its
    agent, restarted without its retirement, says IDLE, and its every claim is refused (``vm_retired_before``); taken
    for an idle VM, it was supply to the scaling pass (a queued job waited on it) and not deleted as retired."""
    before = session.one("lock_vm_row", vm_name=name)
    if created is not None and before is not None and before["retired_created_at"] == created:
        state = "RETIRED"
    row = session.one(
        "upsert_vm", vm_name=name, cluster=cluster, region=region, zone=zone, state=state, job_id=job_id,
        attempt=attempt, jobs=_json_or_null(jobs), seq=seq, sent_at=sent_at, now=now,
        cached_inputs=_json_or_null(cached_inputs), images=_json_or_null(images),
    )
    if row is None and before is not None and heard_at is not None:
        session.run("vm_heard", vm_name=name, heard_at=heard_at)
    if state == "RETIRED" and created is not None:  # which VM of the name retired, older or not (vm_retired_before)
        session.run("vm_retired_as", vm_name=name, created=created)
    return None if row is None else (before["state"] if before else "")


def list_vms(session: Session) -> list[dict[str, Any]]:
    return session.run("list_vms")


def jobs_on_vm(session: Session, vm: str) -> dict[str, int]:
    """Job id -> GPUs held, for the jobs ``vm`` holds (assigned, running or stopping)."""
    return {r["job_id"]: r["gpus"] for r in session.run("jobs_on_vm", vm_name=vm)}


def vm_is_draining(session: Session, vm: str, seq: int) -> bool:
    """Whether a scale-down has marked ``vm`` as going away, or its agent reported it RETIRED (a pull
    limit reached: ``zen.agent.limits``) after drawing ``seq`` (a claim's: one drawn later is a new agent's),
    or a scaling pass saw it leave its MIG and none listed it since (a claim sent before its VM went, delivered
    after its drain mark was forgotten with the instance), read under the VM's advisory lock (so a claim and a
    drain of one VM are ordered: see ``fleet.drain_unless_busy``)."""
    session.run("lock_vm", vm_name=vm)
    return session.one("vm_is_draining", vm_name=vm, seq=seq) is not None


def vm_retired_before(session: Session, vm: str, created: datetime | None) -> bool:
    """Whether the VM of ``vm``'s name created at ``created`` (its token's ``instance_creation_timestamp``:
    ``zen.core.incarnation``) said RETIRED before, whatever it said since: its agent, restarted without its retirement
    (a disk that did not keep ``zen.agent.retired``'s mark, an older agent), claims again on a VM retired for a fault.
    A VM its MIG recreated under the name was created later: not it. False when ``created`` is None (VM proof off).
    Read under the VM's advisory lock, as ``vm_is_draining`` is."""
    if created is None:
        return False
    session.run("lock_vm", vm_name=vm)
    return session.one("vm_retired_before", vm_name=vm, created=created) is not None


def vm_shares(session: Session, vm: str) -> bool | None:
    """Whether ``vm``'s agent may run several jobs at once (its heartbeats list them); None for a VM never heard."""
    row = session.one("vm_shares", vm_name=vm)
    return bool(row["shares"]) if row is not None else None


def vm_model(session: Session, vm: str, ran_from: datetime | None = None) -> str | None:
    """The provisioning model recorded for ``vm`` when a scaling pass first listed it; None: none recorded, or the
    recorded VM seen stopped, not after ``ran_from``, and its MIG's recreation of it not yet seen billed (its name
    tells: ``vm_model``)."""
    row = session.one("vm_model", vm_name=vm, ran_from=ran_from)
    return row["model"] if row is not None else None


def vm_run_marks(session: Session, vm: str) -> tuple[datetime | None, datetime | None]:
    """When ``vm``'s agent was first heard, and when a scaling pass first saw its VM RUNNING; None: not yet."""
    row = session.one_row("vm_run_marks", vm_name=vm)
    return row["first_seen_at"], row["running_at"]


def vm_stop_seen(session: Session, vm: str, since: datetime) -> tuple[str | None, datetime | None, bool] | None:
    """(model, run start, left its MIG) of ``vm`` when a scaling pass saw it stop after ``since``, not by Zen; None:
    not seen so (the query ``vm_stop_seen``)."""
    row = session.one("vm_stop_seen", vm_name=vm, since=since)
    return None if row is None else (row["model"], row["running_at"], row["left_mig"])


def vm_outside_mig(session: Session, vm: str, sent_before: datetime) -> tuple[datetime, float | None] | None:
    """(when a pass saw it leave, its price per hour then: None unpriced) of ``vm`` if a pass saw it leave its MIG
    before ``sent_before`` and no MIG lists it since; else None (the query ``vm_outside_mig``)."""
    row = session.one("vm_outside_mig", vm_name=vm, sent_before=sent_before)
    return None if row is None else (row["left_at"], row["usd_per_hour"])


def held_jobs_silent_since(session: Session, cutoff: datetime, limit: int, stop_cutoff: datetime | None = None,
                           preempted_cutoff: datetime | None = None, timeout_s: float | None = None) -> list[str]:
    """Jobs held by a VM whose last sign of life is older than ``cutoff`` (a STOPPING job's: ``stop_cutoff``, or
    ``preempted_cutoff`` where its queue took it back or a gang stops for a node lost; each ``cutoff`` unless given),
    oldest first; a running one whose agent fences from longer than ``timeout_s`` (``fence_timeout_s``), the
    difference before ``cutoff``."""
    return [r["job_id"] for r in session.run(
        "held_jobs_silent_since", cutoff=cutoff, limit=limit, stop_cutoff=stop_cutoff or cutoff,
        preempted_cutoff=preempted_cutoff or stop_cutoff or cutoff, timeout_s=timeout_s)]


def queued_jobs_published_before(session: Session, cutoff: datetime, limit: int) -> list[str]:
    """QUEUED jobs whose start message went out before ``cutoff``, longest-waiting first."""
    return [r["job_id"] for r in session.run("queued_jobs_published_before", cutoff=cutoff, limit=limit)]


def pending_jobs(session: Session, limit: int, queue_less: bool = False) -> list[str]:
    """PENDING jobs without a hold, oldest first (``queue_less``: only those of no queue)."""
    return [r["job_id"] for r in session.run("pending_jobs", limit=limit, queue_less=queue_less)]


def queued_jobs_to_widen(session: Session, now: datetime, limit: int) -> list[str]:
    """QUEUED jobs whose start is narrowed near their data and due to be widened (``zen.core.routing``)."""
    return [r["job_id"] for r in session.run("queued_jobs_to_widen", now=now, limit=limit)]


def gangs_assembling_in(session: Session, cluster: str, regions: list[str], limit: int) -> list[str]:
    """The cluster's gangs assembling in one of ``regions`` (``zen.core.gang``)."""
    return [r["job_id"] for r in session.run("gangs_assembling_in", cluster=cluster, regions=regions, limit=limit)]


def queued_jobs_uncleared(session: Session, cluster: str, carried: dict[str, list[str]], limit: int) -> list[str]:
    """The cluster's QUEUED jobs allowed a region whose tags (``carried``) lack some the job requires."""
    return [r["job_id"] for r in session.run("queued_jobs_uncleared", cluster=cluster, carried=to_json(carried),
                                             limit=limit)]


def queued_jobs_short(session: Session, cluster: str, carried: dict[str, list[str]], limit: int) -> list[str]:
    """The cluster's QUEUED jobs of requests naming no regions, not allowed a region of ``carried`` fit for them."""
    return [r["job_id"] for r in session.run("queued_jobs_short", cluster=cluster, carried=to_json(carried), limit=limit)]


def queued_jobs_gpus_above(session: Session, cluster: str, gpu_count: int, limit: int) -> list[str]:
    """The cluster's QUEUED jobs asking more GPUs of one VM than ``gpu_count``, oldest first."""
    return [r["job_id"] for r in session.run("queued_jobs_gpus_above", cluster=cluster, gpu_count=gpu_count, limit=limit)]


def queued_jobs_of_other_clusters(session: Session, clusters: list[str], limit: int) -> list[str]:
    """The QUEUED jobs of a cluster not among ``clusters`` (the configured ones), oldest first."""
    return [r["job_id"] for r in session.run("queued_jobs_of_other_clusters", clusters=clusters, limit=limit)]


def queued_jobs_unfit(session: Session, cluster: str, models: list[str], flex_run_s: int, most_nodes: int,
                      regions: list[str], limit: int, flex_alone: bool = False) -> list[str]:
    """The cluster's QUEUED jobs asking what it no longer has (``zen.jobs.stranding``), oldest first."""
    return [r["job_id"] for r in session.run("queued_jobs_unfit", cluster=cluster, models=models, flex_run_s=flex_run_s,
                                             flex_alone=flex_alone, most_nodes=most_nodes, regions=regions,
                                             limit=limit)]


def queued_jobs_outranking(session: Session, cluster: str, priority: int, vm: str, now: datetime,
                           limit: int) -> list[Job]:
    """The cluster's QUEUED single-VM jobs of higher ``priority``, not offered to VMs other than ``vm`` now, highest
    priority first, then oldest (not locked)."""
    return [job_from_row(r) for r in session.run("queued_jobs_outranking", cluster=cluster, priority=priority,
                                                 vm=to_json([vm]), now=now, limit=limit)]


def lock_job_unless_held(session: Session, job_id: str) -> Job | None:
    row = session.one("lock_job_unless_held", job_id=job_id)
    return job_from_row(row) if row else None


def forget_early_stops(session: Session, cutoff: datetime) -> None:
    session.run("forget_early_stops", cutoff=cutoff)


def try_tick_lock(session: Session, key: int) -> bool:
    """One scale tick at a time (session-level advisory lock; False: another tick holds it)."""
    locked: bool = session.one_row("try_tick_lock", key=key)["locked"]
    return locked


def tick_unlock(session: Session, key: int) -> None:
    session.one("tick_unlock", key=key)


def all_job_events(session: Session) -> list[dict[str, Any]]:
    """Every job's history rows, in the order they were written."""
    return session.run("all_job_events")
