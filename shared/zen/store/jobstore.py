"""The job store port (``zen.jobs.store``) over Postgres: each ``JobTx`` method is one of the store's
functions (``repository``, ``queues``, ``usage``, ``rejections``, ``outbox``, ``fleet``, ``submits``) on
the unit of work's ``Session``, so the SQL, the transactions and the statements per message are those
functions' own. ``hooks`` (``zen.jobs.store_hooks.StoreHooks``) run around each operation where a test set some."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from zen.core.models import Job, JobStatus
from zen.jobs.outgoing import Enqueued, OutgoingMessage, outbox_json
from zen.jobs.store import ProbeLook, StoreHooks, hooked
from zen.store import fleet, outbox, queues, rejections, repository, submits, usage
from zen.store.db import Database, Session

if TYPE_CHECKING:
    from zen.core.prices import AttemptPrice


class PostgresJobTx:
    """A ``zen.jobs.store.JobTx`` over one ``Session`` (a transaction, or autocommit)."""

    def __init__(self, session: Session, hooks: StoreHooks | None = None):
        self.session = session  # the raw session, for reads the port does not name (the CLI, tests)
        self.hooks = hooks if hooks is not None else StoreHooks()

    # -- jobs and history -------------------------------------------------------------------
    @hooked("get_job")
    def get_job(self, job_id: str, *, lock: bool = False) -> Job | None:
        return repository.get_job(self.session, job_id, lock=lock)

    @hooked("insert_job")
    def insert_job(self, job: Job) -> bool:
        return repository.insert_job(self.session, job)

    @hooked("save_job")
    def save_job(self, before: Job, after: Job, path: list[JobStatus], now: datetime) -> None:
        repository.save_job(self.session, before, after, path, now)

    @hooked("add_job_events")
    def add_job_events(self, rows: list[dict[str, Any]]) -> None:
        repository.add_job_events(self.session, rows)

    @hooked("job_history")
    def job_history(self, job_id: str) -> list[dict[str, Any]]:
        return repository.job_history(self.session, job_id)

    @hooked("record_progress")
    def record_progress(self, *, job_id: str, attempt: int, vm: str, seq: int, message: str | None,
                        now: datetime, vm_since: datetime | None = None) -> bool:
        return repository.record_progress(self.session, job_id=job_id, attempt=attempt, vm=vm, seq=seq,
                                          message=message, now=now, vm_since=vm_since)

    @hooked("held_jobs_silent_since")
    def held_jobs_silent_since(self, cutoff: datetime, limit: int, stop_cutoff: datetime | None = None,
                               preempted_cutoff: datetime | None = None, timeout_s: float | None = None) -> list[str]:
        return repository.held_jobs_silent_since(self.session, cutoff, limit, stop_cutoff, preempted_cutoff, timeout_s)

    @hooked("queued_jobs_published_before")
    def queued_jobs_published_before(self, cutoff: datetime, limit: int) -> list[str]:
        return repository.queued_jobs_published_before(self.session, cutoff, limit)

    @hooked("queued_jobs_to_widen")
    def queued_jobs_to_widen(self, now: datetime, limit: int) -> list[str]:
        return repository.queued_jobs_to_widen(self.session, now, limit)

    @hooked("gangs_assembling_in")
    def gangs_assembling_in(self, cluster: str, regions: list[str], limit: int) -> list[str]:
        return repository.gangs_assembling_in(self.session, cluster, regions, limit)

    @hooked("queued_jobs_outranking")
    def queued_jobs_outranking(self, cluster: str, priority: int, vm: str, now: datetime, limit: int) -> list[Job]:
        return repository.queued_jobs_outranking(self.session, cluster, priority, vm, now, limit)

    @hooked("lock_job_unless_held")
    def lock_job_unless_held(self, job_id: str) -> Job | None:
        return repository.lock_job_unless_held(self.session, job_id)

    @hooked("queued_jobs_uncleared")
    def queued_jobs_uncleared(self, cluster: str, carried: dict[str, list[str]], limit: int) -> list[str]:
        return repository.queued_jobs_uncleared(self.session, cluster, carried, limit)

    @hooked("queued_jobs_short")
    def queued_jobs_short(self, cluster: str, carried: dict[str, list[str]], limit: int) -> list[str]:
        return repository.queued_jobs_short(self.session, cluster, carried, limit)

    @hooked("queued_jobs_gpus_above")
    def queued_jobs_gpus_above(self, cluster: str, gpu_count: int, limit: int) -> list[str]:
        return repository.queued_jobs_gpus_above(self.session, cluster, gpu_count, limit)

    @hooked("queued_jobs_of_other_clusters")
    def queued_jobs_of_other_clusters(self, clusters: list[str], limit: int) -> list[str]:
        return repository.queued_jobs_of_other_clusters(self.session, clusters, limit)

    @hooked("queued_jobs_unfit")
    def queued_jobs_unfit(self, cluster: str, models: list[str], flex_run_s: int, most_nodes: int, regions: list[str],
                          limit: int, flex_alone: bool = False) -> list[str]:
        return repository.queued_jobs_unfit(self.session, cluster, models, flex_run_s, most_nodes, regions, limit,
                                            flex_alone)

    @hooked("pending_jobs")
    def pending_jobs(self, limit: int, queue_less: bool = False) -> list[str]:
        return repository.pending_jobs(self.session, limit, queue_less)

    # -- early stops, the tick's clock ------------------------------------------------------
    @hooked("remember_early_stop")
    def remember_early_stop(self, job_id: str, reason: str, now: datetime, principal: str | None = None) -> None:
        repository.remember_early_stop(self.session, job_id, reason, now, principal)

    @hooked("take_early_stops")
    def take_early_stops(self, job_id: str) -> list[tuple[str, str | None]]:
        return repository.take_early_stops(self.session, job_id)

    @hooked("kept_stop_names")
    def kept_stop_names(self, job_id: str) -> list[str]:
        return repository.kept_stop_names(self.session, job_id)

    @hooked("forget_early_stops")
    def forget_early_stops(self, cutoff: datetime) -> None:
        repository.forget_early_stops(self.session, cutoff)

    @hooked("early_stops_of_submitted_jobs")
    def early_stops_of_submitted_jobs(self, limit: int) -> list[str]:
        return repository.early_stops_of_submitted_jobs(self.session, limit)

    @hooked("record_tick")
    def record_tick(self, now: datetime, gap_s: float) -> datetime | None:
        return repository.record_tick(self.session, now, gap_s)

    def look_at_probe(self, now: datetime, late_s: float, stale_s: float, nonce: str) -> ProbeLook:
        row = repository.look_at_probe(self.session, now, late_s, stale_s, nonce)
        return ProbeLook(row["back_at"], row["publish"], row["late"], row["seen"], row["sent_at"], row["vouched_at"],
                         row["lag_s"], row["lag_at"])

    def probe_unsent(self, nonce: str) -> None:
        self.session.run("probe_unsent", nonce=nonce)

    def probe_heard(self, nonce: str, now: datetime) -> float | None:
        return repository.probe_heard(self.session, nonce, now)

    def heard_late(self, lag_s: float, now: datetime, fresh_s: float) -> None:
        self.session.run("heard_late", lag_s=float(lag_s), now=now, fresh_s=float(fresh_s))

    # -- outbox -----------------------------------------------------------------------------
    @hooked("add_outbox")
    def add_outbox(self, messages: Sequence[OutgoingMessage], now: datetime) -> list[int]:
        return outbox.insert(self.session, outbox_json(messages), now)

    @hooked("unsent_outbox")
    def unsent_outbox(self, cutoff: datetime, limit: int) -> list[Enqueued]:
        return [Enqueued(r["id"], OutgoingMessage(r["topic"], bytes(r["data"]), dict(r["attributes"] or {})))
                for r in outbox.unsent(self.session, cutoff, limit)]

    @hooked("mark_outbox_sent")
    def mark_outbox_sent(self, ids: list[int], now: datetime, *, durable: bool = True) -> None:
        outbox.mark_sent(self.session, ids, now, durable=durable)

    @hooked("mark_outbox_failed")
    def mark_outbox_failed(self, id_: int, error: str) -> None:
        outbox.mark_failed(self.session, id_, error)

    @hooked("prune_outbox")
    def prune_outbox(self, cutoff: datetime, limit: int) -> int:
        return outbox.prune(self.session, cutoff, limit)

    # -- admission --------------------------------------------------------------------------
    @hooked("queue_lock")
    def queue_lock(self, key: str) -> None:
        queues.lock(self.session, key)

    @hooked("admitted")
    def admitted(self, queue_names: list[str], cluster: str) -> list[dict[str, Any]]:
        return queues.admitted(self.session, queue_names, cluster)

    @hooked("preemption_candidates")
    def preemption_candidates(self, queue_names: list[str], cluster: str, limit: int) -> list[Job]:
        return queues.preemption_candidates(self.session, queue_names, cluster, limit)

    # -- arrays ----------------------------------------------------------------------------------
    @hooked("array_let_go")
    def array_let_go(self, array_id: str) -> int:
        row = self.session.one("array_let_go", array_id=array_id)
        return int(row["n"]) if row else 0

    @hooked("array_next_held")
    def array_next_held(self, array_id: str) -> Job | None:
        row = self.session.one("array_next_held", array_id=array_id)
        return repository.job_from_row(row) if row else None

    @hooked("arrays_holding")
    def arrays_holding(self, limit: int) -> list[str]:
        return [r["array_id"] for r in self.session.run("arrays_holding", limit=limit)]

    @hooked("array_tasks")
    def array_tasks(self, array_id: str) -> list[Job]:
        return [repository.job_from_row(r) for r in self.session.run("array_tasks", array_id=array_id)]

    @hooked("array_end")
    def array_end(self, array_id: str) -> tuple[int, int, str | None]:
        row = self.session.one("array_end", array_id=array_id)  # an aggregate: always one row
        assert row is not None
        return int(row["tasks"]), int(row["unended"]), row["first_other"]

    @hooked("arrays_named")
    def arrays_named(self, names: list[str]) -> list[str]:
        return [r["array_id"] for r in self.session.run("arrays_named", names=names)]

    def lock_job_ids(self, job_ids: list[str]) -> None:
        for job_id in sorted(set(job_ids)):
            self.session.run("lock_job_id", job_id=job_id)

    @hooked("waiting_after")
    def waiting_after(self, names: list[str]) -> list[Job]:
        return [repository.job_from_row(r) for r in self.session.run("waiting_after", names=json.dumps(names))]

    @hooked("held_after")
    def held_after(self, limit: int) -> list[str]:
        return [r["job_id"] for r in self.session.run("held_after", limit=limit)]

    @hooked("retry_due")
    def retry_due(self, now: datetime, limit: int, kind: str, of_kind: bool) -> list[str]:
        like = kind.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"  # the prefix, as itself
        return [r["job_id"] for r in self.session.run("retry_due", now=now, limit=limit, kind=like, of_kind=of_kind)]

    @hooked("pending_of_queue")
    def pending_of_queue(self, queue: str, cluster: str, limit: int, most: int) -> list[Job]:
        return queues.pending(self.session, queue, cluster, limit, most)

    @hooked("waiting_queues")
    def waiting_queues(self) -> list[tuple[str, str]]:
        return queues.waiting_queues(self.session)

    @hooked("queue_head")
    def queue_head(self, queue: str, cluster: str, most: int) -> tuple[str, int] | None:
        return queues.queue_head(self.session, queue, cluster, most)

    @hooked("jobs_ahead")
    def jobs_ahead(self, job: Job, most: int) -> int:
        return queues.jobs_ahead(self.session, job, most)

    @hooked("queue_usage")
    def queue_usage(self, queue_names: list[str]) -> dict[tuple[str, str], tuple[float, datetime]]:
        return queues.usage(self.session, queue_names)

    @hooked("save_queue_usage")
    def save_queue_usage(self, queue: str, cluster: str, gpu_seconds: float, now: datetime) -> None:
        queues.save_usage(self.session, queue, cluster, gpu_seconds, now)

    @hooked("queue_counts")
    def queue_counts(self) -> list[dict[str, Any]]:
        return queues.counts(self.session)

    # -- usage ------------------------------------------------------------------------------
    @hooked("record_attempt")
    def record_attempt(self, job: Job, *, outcome: str, machine_type: str | None, gpus: int,
                       ran_from: datetime | None, now: datetime, vm_share: float = 1.0,
                       price: AttemptPrice | None = None, gpu_factor: float = 1.0) -> bool:
        return usage.record_attempt(self.session, job, outcome=outcome, machine_type=machine_type, gpus=gpus,
                                    ran_from=ran_from, now=now, vm_share=vm_share, price=price, gpu_factor=gpu_factor)

    @hooked("lost_attempt")
    def lost_attempt(self, job_id: str, attempt: int) -> dict[str, Any] | None:
        return usage.lost_attempt(self.session, job_id, attempt)

    @hooked("record_late_outcome")
    def record_late_outcome(self, job_id: str, attempt: int, outcome: str) -> bool:
        return usage.record_late_outcome(self.session, job_id, attempt, outcome)

    # -- rejections -------------------------------------------------------------------------
    @hooked("record_rejection")
    def record_rejection(self, *, source: str, message_id: str, job_id: str | None, reason: str,
                         payload: bytes, now: datetime, key: str | None = None, principal: str | None = None,
                         named_job_id: str | None = None) -> bool:
        return rejections.record(self.session, source=source, message_id=message_id, job_id=job_id,
                                 reason=reason, payload=payload, now=now, key=key, principal=principal,
                                 named_job_id=named_job_id)

    @hooked("rejection_last_seen")
    def rejection_last_seen(self, source: str, key: str) -> datetime | None:
        return rejections.last_seen(self.session, source, key)

    # -- fleet ------------------------------------------------------------------------------
    @hooked("blocked_regions")
    def blocked_regions(self, cluster: str, now: datetime, since: datetime | None = None) -> set[str]:
        return fleet.blocked_regions(self.session, cluster, now, since)

    @hooked("gang_rooms")
    def gang_rooms(self, cluster: str) -> dict[str, tuple[int, datetime | None]]:
        return fleet.gang_rooms(self.session, cluster)

    @hooked("vms_holding")
    def vms_holding(self, cluster: str, regions: list[str], inputs: list[str], image: str | None,
                    now: datetime, limit: int = 20) -> list[tuple[str, str, bool, str | None]]:
        return fleet.vms_holding(self.session, cluster, regions, inputs, image, now, limit)

    @hooked("upsert_vm")
    def upsert_vm(self, *, name: str, cluster: str, region: str, zone: str, state: str, job_id: str | None,
                  attempt: int | None, seq: int, sent_at: datetime, now: datetime,
                  jobs: list[dict[str, Any]] | None = None, cached_inputs: list[str] | None = None,
                  images: list[str] | None = None, heard_at: datetime | None = None,
                  created: datetime | None = None) -> str | None:
        return repository.upsert_vm(self.session, name=name, cluster=cluster, region=region, zone=zone,
                                    state=state, job_id=job_id, attempt=attempt, seq=seq, sent_at=sent_at,
                                    now=now, jobs=jobs, cached_inputs=cached_inputs, images=images, heard_at=heard_at,
                                    created=created)

    @hooked("vm_is_draining")
    def vm_is_draining(self, vm: str, seq: int) -> bool:
        return repository.vm_is_draining(self.session, vm, seq)

    @hooked("vm_retired_before")
    def vm_retired_before(self, vm: str, created: datetime | None) -> bool:
        return repository.vm_retired_before(self.session, vm, created)

    @hooked("jobs_on_vm")
    def jobs_on_vm(self, vm: str) -> dict[str, int]:
        return repository.jobs_on_vm(self.session, vm)

    @hooked("vm_model")
    def vm_model(self, vm: str, ran_from: datetime | None = None) -> str | None:
        return repository.vm_model(self.session, vm, ran_from)

    @hooked("vm_run_marks")
    def vm_run_marks(self, vm: str) -> tuple[datetime | None, datetime | None]:
        return repository.vm_run_marks(self.session, vm)

    @hooked("vm_stop_seen")
    def vm_stop_seen(self, vm: str, since: datetime) -> tuple[str | None, datetime | None, bool] | None:
        return repository.vm_stop_seen(self.session, vm, since)

    @hooked("vm_outside_mig")
    def vm_outside_mig(self, vm: str, sent_before: datetime) -> tuple[datetime, float | None] | None:
        return repository.vm_outside_mig(self.session, vm, sent_before)

    @hooked("vm_shares")
    def vm_shares(self, vm: str) -> bool | None:
        return repository.vm_shares(self.session, vm)

    @hooked("drain_unless_busy")
    def drain_unless_busy(self, vm: str, cluster: str, region: str, now: datetime) -> bool:
        return fleet.drain_unless_busy(self.session, vm, cluster, region, now)


class PostgresJobStore:
    """A ``zen.jobs.store.JobStore`` over a ``Database`` (its pool, transactions and error classes)."""

    def __init__(self, db: Database):
        self.db = db
        self.hooks = StoreHooks()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[PostgresJobTx]:
        with self.db.transaction() as session:
            yield PostgresJobTx(session, self.hooks)

    @contextlib.contextmanager
    def session(self) -> Iterator[PostgresJobTx]:
        with self.db.session() as session:
            yield PostgresJobTx(session, self.hooks)

    def submissions(self, committed: Callable[[list[Enqueued]], None]) -> submits.GroupCommit:
        return submits.GroupCommit(self.db, committed, hooks=self.hooks)

    @contextlib.contextmanager
    def tick_lock(self, key: int) -> Iterator[bool]:
        """An advisory lock on one connection, held for the block (whether it was taken)."""
        with self.db.session_lock(lambda s: repository.try_tick_lock(s, key),
                                  lambda s: repository.tick_unlock(s, key)) as lease:
            yield bool(lease)

    def prune_rejections(self, now: datetime) -> int:
        return rejections.prune(self.db, now)
