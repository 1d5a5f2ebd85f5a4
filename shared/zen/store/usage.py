"""Accounting rows: what each attempt used, recorded as it ends (one ``attempt_usage`` row per attempt a
VM claimed, in the transaction that ends it; a redelivered end counts once), and the sums ``zen usage``
reports, with the fleet's own VM-hours per region (``fleet_by_region``).

Units (wall time, GPU-seconds, VM-seconds and a shared VM's split): docs/explanations/accounting.md.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from zen.core.lifecycle import UNSPENT
from zen.core.models import Job

if TYPE_CHECKING:
    from zen.core.prices import AttemptPrice
    from zen.store.db import Session

GROUPINGS = ("user", "queue", "region")


def read_snapshot(session: "Session") -> None:
    """Make the transaction just begun read one snapshot, read-only: a report of several statements (``zen
    usage``'s groups, dollars, total and fleet; ``zen stats``; a console page) at Postgres's default READ
    COMMITTED saw in each what committed before it, so an attempt ending while it was read (every second on a
    busy deployment) was in some figures and not others (the groups did not add up to the total). A scaling
    pass's facts too (``zen.scaling.fleetdb.FleetDb.facts``: its demand and the VMs that hold jobs)."""
    session.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
# The group an attempt falls in, by ``:by`` (one expression for every grouped query).
_GROUP_KEY = """CASE CAST(:by AS text) WHEN 'user' THEN user_id WHEN 'queue' THEN queue
                                      WHEN 'region' THEN region ELSE 'total' END AS key,"""

QUERIES = {
    # Per group: jobs and attempts that ended in the window, their GPU-seconds and VM-seconds. A job
    # whose attempts fall in two groups (two regions) counts in both; ``:by`` 'total' is one group.
    "usage_by": """
        SELECT """ + _GROUP_KEY + """
               count(DISTINCT job_id) AS jobs, count(*) AS attempts, sum(gpu_seconds) AS gpu_seconds,
               sum(extract(epoch FROM ended_at - started_at) * vm_share) AS vm_seconds
        FROM attempt_usage WHERE ended_at >= :since
        GROUP BY 1 ORDER BY 1""",
    # Each attempt that ended in the window with what prices it (zen.cli.usage.Pricer): its group, cluster,
    # machine type, region and VM, seconds and VM share, and the model and price kept as it ended (NULL
    # before they were: the model from the VM's name, today's price).
    "attempt_seconds": """
        SELECT """ + _GROUP_KEY + """
               job_id, attempt, cluster, machine_type, region, vm, vm_share, model, usd_per_hour,
               extract(epoch FROM ended_at - started_at) AS seconds
        FROM attempt_usage WHERE ended_at >= :since
        ORDER BY 1, ended_at""",
    # The fleet: seconds each MIG instance's VMs were billed in the window, boot and idle included (instances
    # still there and those gone, ``vm_lifetimes``), one row per VM. A VM counts from the first scaling pass
    # that listed it billed (``running_at``: RUNNING, or past it; never, for an instance listed without a VM
    # through a stockout) to the last, so each end may be off by up to one tick; the VMs an instance had before
    # (``billed_before``: a preempted spot VM its MIG recreated under the same name) each count so, not the
    # time between them. Rows are kept by pool (zen.core.provisioning): its region is the key's before any "/";
    # its model as seen then (migration 0037; NULL before it: the VM's name says, under today's configuration);
    # a flex-start request's pending VMs (<MIG>+<request>+<n>: zen.adapters.flex_start) are not billed.
    # began_in_window: its RUNNING began in the window, which then bears GCE's one-minute minimum; else
    # before_window, its seconds billed before the window (what of the minute its seconds in the window used up).
    # usd_per_hour:
    # the price of the VM's pool when it began (migration 0056; NULL before it, or unpriced then: today's).
    "fleet_by_region": """
        SELECT split_part(region, '/', 1) AS region, cluster, name, vm.model, vm.usd_per_hour,
               GREATEST(0, extract(epoch FROM LEAST(vm.until, CAST(:now AS timestamptz))
                                              - GREATEST(vm.since, CAST(:since AS timestamptz)))) AS vm_seconds,
               vm.since >= CAST(:since AS timestamptz) AS began_in_window,
               GREATEST(0, extract(epoch FROM LEAST(vm.until, CAST(:since AS timestamptz)) - vm.since)) AS before_window
        FROM (SELECT name, region, cluster, running_at, last_seen_at, model, billed_before, usd_per_hour
              FROM mig_instances
              UNION ALL
              SELECT name, region, cluster, running_at, last_seen_at, model, billed_before, usd_per_hour
              FROM vm_lifetimes WHERE last_seen_at > :since) AS seen,
             LATERAL (SELECT running_at AS since, last_seen_at AS until, model, usd_per_hour WHERE running_at IS NOT NULL
                      UNION ALL  -- an earlier segment at the model it ran as (its third element; before: the row's)
                      SELECT CAST(earlier ->> 0 AS timestamptz), CAST(earlier ->> 1 AS timestamptz),
                             COALESCE(earlier ->> 2, model), CAST(earlier ->> 3 AS double precision)  -- and its price
                      FROM jsonb_array_elements(COALESCE(billed_before, '[]'::jsonb)) AS earlier) AS vm
        WHERE vm.until > :since AND strpos(name, '+') = 0
        ORDER BY 1, cluster, name, vm.since""",
    # VM-seconds jobs ran (each attempt from RUNNING to its end, x its VMs: a gang's nodes, a share of a VM it
    # shared), whatever became of them: a failed attempt retried included.
    "vm_seconds_run": """
        SELECT COALESCE(SUM(extract(epoch FROM ended_at - started_at) * vm_share), 0) AS seconds
        FROM attempt_usage WHERE started_at IS NOT NULL""",
    "attempts_of_job": """
        SELECT * FROM attempt_usage WHERE job_id = :job_id ORDER BY attempt""",
    # An attempt recorded LOST, or PREEMPTED by its queue (``lost_attempt``): the VM that held it, when it
    # took it, its outcome, whether the sweep gave it up (its LOST history row is the sweep's: not a cloud
    # preemption its VM reported; or the sweep's PENDING: no answer to the preemption's stop in time), and
    # whether a later attempt was held by a VM since (has a row), and whether the sweep's loss spent no attempt (its
    # LOST row says :unspent: the cloud took the VM, zen.jobs.cloud_silence). Read by primary key and (job_id, id)
    # index.
    "lost_attempt": """
        SELECT u.vm, u.started_at, u.outcome,
               EXISTS (SELECT 1 FROM job_events e WHERE e.job_id = u.job_id AND e.attempt = u.attempt
                       AND e.to_status = CASE u.outcome WHEN 'LOST' THEN 'LOST' ELSE 'PENDING' END
                       AND e.actor = 'sweep') AS by_sweep,
               EXISTS (SELECT 1 FROM job_events e WHERE e.job_id = u.job_id AND e.attempt = u.attempt
                       AND e.to_status = 'LOST' AND e.actor = 'sweep' AND strpos(e.reason, :unspent) > 0) AS unspent,
               EXISTS (SELECT 1 FROM attempt_usage l WHERE l.job_id = u.job_id AND l.attempt > u.attempt)
                   AS later_held
        FROM attempt_usage u
        WHERE u.job_id = :job_id AND u.attempt = :attempt AND u.outcome IN ('LOST', 'PREEMPTED')""",
    "late_outcome": """
        UPDATE attempt_usage SET outcome = :outcome
        WHERE job_id = :job_id AND attempt = :attempt AND outcome IN ('LOST', 'PREEMPTED') RETURNING attempt""",
}


def record_attempt(session: Session, job: Job, *, outcome: str, machine_type: str | None, gpus: int,
                   ran_from: datetime | None, now: datetime, vm_share: float = 1.0,
                   price: AttemptPrice | None = None, gpu_factor: float = 1.0) -> bool:
    """The usage of ``job``'s current attempt, which ends now (``job`` as it was before the change;
    ``gpus``: those it held; ``vm_share``: its share of the VM, below 1 only when it shared it, a gang's
    nodes (zen.core.gang) when it held several; ``ran_from``: when that attempt began running, if it did;
    ``price``: its VMs' models and prices now, kept with it; ``gpu_factor``: its GPU-seconds' share of ``gpus`` x
    wall time, below 1 for a gang whose nodes did not all run to its end). False when already recorded."""
    row = session.one(
        "insert_attempt_usage", job_id=job.job_id, attempt=job.attempt, user_id=job.user_id, queue=job.queue,
        cluster=job.cluster, machine_type=machine_type, region=job.region, vm=job.vm, gpus=gpus,
        ran_from=ran_from, ended_at=now, outcome=outcome, gpu_factor=gpu_factor,
        vms=json.dumps([{"rank": rank, "vm": vm, "model": model, "share": share}
                        for rank, (vm, model, share) in enumerate(price.vms)] if price else []),
        fixed=json.dumps(price.fixed if price else {}), fallback=json.dumps(price.fallback if price else {}),
        use_catalog=bool(price and price.catalog),
    )
    if row is not None and vm_share != 1.0:  # one more statement, only for an attempt that shared its VM or a gang
        session.run("share_attempt_vm", job_id=job.job_id, attempt=job.attempt, vm_share=vm_share)
    return row is not None


def run(session: Session, name: str, **params: Any) -> list[dict[str, Any]]:
    return session.sql(QUERIES[name], **params)


def attempts_of_job(session: Session, job_id: str) -> list[dict[str, Any]]:
    return run(session, "attempts_of_job", job_id=job_id)


def lost_attempt(session: Session, job_id: str, attempt: int) -> dict[str, Any] | None:
    """``attempt`` of ``job_id`` if its row says LOST or PREEMPTED: ``vm``, ``started_at``, ``outcome``,
    ``by_sweep`` (the sweep gave it up: took it for lost, or its preemption's stop unanswered),
    ``later_held`` (a later attempt was held by a VM since) and ``unspent`` (the sweep requeued it without
    spending an attempt: the cloud took its VM); None otherwise."""
    rows = run(session, "lost_attempt", job_id=job_id, attempt=attempt, unspent=UNSPENT)
    return rows[0] if rows else None


def record_late_outcome(session: Session, job_id: str, attempt: int, outcome: str) -> bool:
    """A lost attempt's final report came after all (``zen.jobs.late_final``): its row says ``outcome``
    (SUCCEEDED or FAILED) instead of LOST or PREEMPTED. Its times stay: the VM was the attempt's until the
    sweep gave it up. False when the row says neither (already corrected)."""
    return bool(run(session, "late_outcome", job_id=job_id, attempt=attempt, outcome=outcome))
