"""Rows of admission (``zen.jobs.queueing``): the per-cohort lock, GPUs admitted per queue, waiting jobs in
admission order, and decayed usage for fair sharing. Every call runs in the caller's transaction."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from zen.core.models import Job
from zen.store.repository import job_from_row

if TYPE_CHECKING:
    from zen.store.db import Session


def lock(session: Session, key: str) -> None:
    """Serialise admission for one cohort (or lone queue) until the transaction ends."""
    session.one("queue_lock", key=key)


def admitted_gpus(session: Session, queues: list[str], cluster: str) -> dict[str, int]:
    """Queue -> GPUs its admitted jobs hold on ``cluster``."""
    return {r["queue"]: r["gpus"] for r in admitted(session, queues, cluster)}


def admitted(session: Session, queues: list[str], cluster: str) -> list[dict[str, Any]]:
    """Per queue: ``gpus`` its admitted jobs hold on ``cluster``, ``freeing``: of those, held by jobs
    being stopped (STOPPING), which free them when their VM answers or at the stop deadline.

    Every STOPPING job counts, not only those stopped for a preemption: a user's stop of a job being
    preempted clears its ``preempted_by`` (the stop wins: it ends CANCELLED, ``lifecycle.decide_stop``)
    but its quota is still on its way back, and a pass that stopped counting it would preempt a
    second victim for the same preemptor. A user's stop of any other job frees quota just as surely,
    so no preemption is needed for it either until it has ended. A gang stopping because it lost a node
    (``zen.core.gang_ends.losing_node``: neither ``preempted_by`` nor ``stop_reason``) is not counted: it is
    requeued holding its quota, and a head kept room for those GPUs would wait for nothing."""
    return session.run("admitted_gpus", queues=json.dumps(queues), cluster=cluster)


def preemption_candidates(session: Session, queues: list[str], cluster: str, limit: int) -> list[Job]:
    """Admitted jobs of ``queues`` a preemption may take back, cheapest first (the first ``limit`` of each
    queue), locked, up to the first one locked elsewhere (its end or its stop being applied): the pass takes
    the cheapest or none, never a dearer one in the place of one held a moment."""
    return _unjumped(session.run("preemption_candidates", queues=json.dumps(queues), cluster=cluster, limit=limit))


def pending(session: Session, queue: str, cluster: str, limit: int, most: int) -> list[Job]:
    """The queue's PENDING jobs of ``cluster`` of at most ``most`` GPUs in admission order, locked, up to
    the first one locked elsewhere (a stop being applied, a late report of a preempted attempt): the
    queue waits for the next pass rather than let a job behind it jump it (only the head was checked:
    a job locked elsewhere further down was overtaken by the ones behind it)."""
    return _unjumped(session.run("pending_of_queue", queue=queue, cluster=cluster, limit=limit, most=most))


def _unjumped(rows: list[dict[str, Any]]) -> list[Job]:
    """The rows (each with ``ahead``, its place read without locks) before the first one locked elsewhere."""
    jobs = []
    for n, row in enumerate(rows):
        if row["ahead"] != n:  # a job before this one is held elsewhere
            break
        jobs.append(job_from_row(row))
    return jobs


def waiting_queues(session: Session) -> list[tuple[str, str]]:
    return [(r["queue"], r["cluster"]) for r in session.run("waiting_queues")]


def queue_head(session: Session, queue: str, cluster: str, most: int) -> tuple[str, int] | None:
    row = session.one("queue_head", queue=queue, cluster=cluster, most=most)
    return (row["job_id"], row["gpus"]) if row else None


def jobs_ahead(session: Session, job: Job, most: int) -> int:
    ahead: int = session.one_row("jobs_ahead", queue=job.queue, cluster=job.cluster, priority=job.priority,
                                 submitted_at=job.submitted_at, job_id=job.job_id, most=most)["n"]
    return ahead


def usage(session: Session, queues: list[str]) -> dict[tuple[str, str], tuple[float, datetime]]:
    """(queue, cluster) -> (decayed GPU-seconds, when last brought up to date)."""
    return {(r["queue"], r["cluster"]): (r["gpu_seconds"], r["updated_at"])
            for r in session.run("queue_usage", queues=json.dumps(queues))}


def save_usage(session: Session, queue: str, cluster: str, gpu_seconds: float, now: datetime) -> None:
    session.run("save_queue_usage", queue=queue, cluster=cluster, gpu_seconds=gpu_seconds, now=now)


def counts(session: Session) -> list[dict[str, Any]]:
    """Per (queue, cluster): pending, admitted_waiting, running, admitted_gpus."""
    return session.run("queue_counts")
