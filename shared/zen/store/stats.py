"""The operator's figures (``zen stats``, and the tick's ``jobs.count`` / ``outbox.backlog`` lines)
read from Postgres: the same vocabulary as the log-based metrics of terraform/monitoring.tf (see
``zen.telemetry.METRICS``). Read-only queries; counters cover a window ending at ``:now``."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zen.store.db import Session

ACTIVE_STATUSES = ("PENDING", "QUEUED", "ASSIGNED", "RUNNING", "STOPPING")

QUERIES = {
    # zen_jobs: jobs by status per cluster (``:active`` true: only statuses still in flight).
    "jobs_by_status": """
        SELECT cluster, status, count(*) AS jobs FROM jobs
        WHERE NOT CAST(:active AS boolean) OR status IN ('PENDING','QUEUED','ASSIGNED','RUNNING','STOPPING')
        GROUP BY cluster, status ORDER BY cluster, status""",
    # zen_job_status_changes: status changes in the window by cluster and new status (a history row
    # that changes no status, such as a start widened by zen.core.routing, is not one).
    "job_status_changes": """
        SELECT j.cluster, e.to_status AS status, count(*) AS changes FROM job_events e JOIN jobs j ON j.job_id = e.job_id
        WHERE e.at >= :since AND e.from_status IS DISTINCT FROM e.to_status GROUP BY j.cluster, e.to_status ORDER BY j.cluster, e.to_status""",
    # zen_time_to_start: seconds from submission to start of the jobs whose current attempt started in
    # the window (the log metric also counts starts of attempts since lost, which the row forgets).
    "time_to_start": """
        SELECT cluster, region, count(*) AS jobs,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - submitted_at)) AS p50_s,
               percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - submitted_at)) AS p95_s
        FROM jobs WHERE started_at >= :since AND region IS NOT NULL
        GROUP BY cluster, region ORDER BY cluster, region""",
    # zen_vms: the MIG instances a pass last saw, in the phases the planner gives them.
    "vms_by_state": """
        SELECT i.cluster, i.region,
               CASE WHEN d.name IS NOT NULL OR v.state IN ('STOPPING','RETIRED') THEN 'DELETING'
                    WHEN EXISTS (SELECT 1 FROM jobs j WHERE j.vm = i.name
                                 AND j.status IN ('ASSIGNED','RUNNING','STOPPING')) THEN 'BUSY'
                    WHEN v.name IS NULL THEN 'BOOTING'
                    WHEN v.state = 'IDLE' THEN 'IDLE' ELSE 'BUSY' END AS state,
               count(*) AS vms
        FROM mig_instances i LEFT JOIN vms v ON v.name = i.name LEFT JOIN vm_drains d ON d.name = i.name
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""",
    # zen_region_blocked: regions the planner will not ask for VMs until blocked_until.
    "blocked_regions": """
        SELECT cluster, region, CAST(memory->>'blocked_until' AS timestamptz) AS blocked_until,
               CAST(memory->>'strikes' AS integer) AS strikes
        FROM scaling_memory
        WHERE memory->>'blocked_until' IS NOT NULL AND CAST(memory->>'blocked_until' AS timestamptz) > :now
        ORDER BY cluster, region""",
    # zen_scaling_decisions: decisions in the window by cluster and action.
    "scaling_decisions": """
        SELECT cluster, action, count(*) AS decisions FROM scaling_decisions WHERE at >= :since
        GROUP BY cluster, action ORDER BY cluster, action""",
    # zen_rejected_messages: rejections in the window (classified by zen.telemetry.reason_class).
    "rejected_messages": """
        SELECT source, reason FROM rejected_messages WHERE at >= :since ORDER BY id""",
    # zen_gangs_waiting: gangs (zen.core.gang) QUEUED with some nodes claimed, and the VMs those hold meanwhile.
    "gangs_waiting": """
        SELECT cluster, count(*) AS gangs, CAST(sum(jsonb_array_length(gang)) AS integer) AS nodes FROM jobs
        WHERE status = 'QUEUED' AND gang IS NOT NULL GROUP BY cluster ORDER BY cluster""",
    # zen_lost_attempts: attempts that went LOST in the window, by cluster.
    "lost_attempts": """
        SELECT j.cluster, count(*) AS attempts FROM job_events e JOIN jobs j ON j.job_id = e.job_id
        WHERE e.to_status = 'LOST' AND e.at >= :since GROUP BY j.cluster ORDER BY j.cluster""",
    # zen_outbox_backlog_age: unsent outbox rows and the age of the oldest.
    "outbox_backlog": """
        SELECT count(*) AS rows, coalesce(extract(epoch FROM :now - min(created_at)), 0) AS oldest_s
        FROM outbox WHERE sent_at IS NULL""",
    # zen_oldest_queued: the oldest QUEUED job of each cluster.
    "oldest_queued": """
        SELECT DISTINCT ON (cluster) cluster, job_id, extract(epoch FROM :now - queued_at) AS age_s
        FROM jobs WHERE status = 'QUEUED' ORDER BY cluster, queued_at""",
}


def run(session: Session, name: str, **params: Any) -> list[dict[str, Any]]:
    return session.sql(QUERIES[name], **params)


def database_now(session: Session) -> datetime:
    """The database's clock (its transaction's start): the times ``zen stats`` measures ages and windows from were
    written by Zen's functions and database, not by the machine that reads them, whose clock may be behind."""
    now: datetime = session.sql("SELECT now() AS now")[0]["now"]
    return now


def outbox_backlog(session: Session, now: datetime) -> dict[str, Any]:
    row = run(session, "outbox_backlog", now=now)[0]
    return {"rows": int(row["rows"]), "oldest_s": float(row["oldest_s"])}


def active_jobs(session: Session) -> list[dict[str, Any]]:
    return run(session, "jobs_by_status", active=True)
