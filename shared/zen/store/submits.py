"""Group commit of submissions: concurrent deliveries share one statement and one commit. A caller that
finds no write in flight leads: it writes what is queued (its own first) in one statement, hands every
caller its result and the relay the outbox rows, and passes the lead on; a refused batch is written
again job by job, and a job the statement did not write takes the general path.

Why, and the rules for failures, stuck statements and deadlocks: docs/benchmarks/control-plane.md
(where the time went).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

from zen.core.errors import TransientError
from zen.core.models import Job
from zen.jobs.outgoing import Enqueued, OutgoingMessage, outbox_entries
from zen.jobs.store import StoreHooks

if TYPE_CHECKING:
    from zen.store.db import Database, Session

_HISTORY_KEYS = ("actor", "from_status", "to_status", "reason")


class _Entry:
    __slots__ = ("row", "messages", "done", "lead", "result", "alone", "error")

    def __init__(self, row: dict[str, Any], messages: list[OutgoingMessage]):
        self.row, self.messages = row, messages
        self.done = threading.Event()  # set when ``result`` is known, or the caller must lead or go alone
        self.lead = self.alone = False
        self.result: list[Enqueued] = []
        self.error: TransientError | None = None  # the batch's: Postgres unavailable, redeliver


def submission_row(job: Job, history: list[dict[str, Any]], messages: list[OutgoingMessage],
                   now: datetime) -> dict[str, Any]:
    """One element of ``submit_jobs``'s ``:jobs`` array."""
    return {"job_id": job.job_id, "at": now.isoformat(), "max_attempts": job.max_attempts, "cluster": job.cluster,
            "user_id": job.user_id, "priority": job.priority, "regions": job.regions, "request": job.request,
            "request_hash": job.request_hash, "max_runtime_s": job.max_runtime_s, "gpus": job.gpus,
            "start_regions": job.start_regions, "widen_at": job.widen_at.isoformat() if job.widen_at else None,
            "start_vms": job.start_vms, "history": [{k: h[k] for k in _HISTORY_KEYS} for h in history],
            "messages": outbox_entries(messages)}


def insert_queued_jobs(session: Session, batch: list[tuple[dict[str, Any], list[OutgoingMessage]]]
                       ) -> list[list[Enqueued]]:
    """``submit_jobs`` for ``batch`` (rows from ``submission_row`` and their messages): per entry, its
    outbox rows in its messages' order, or [] when it was not written."""
    out = session.one_row("submit_jobs", jobs=json.dumps([row for row, _ in batch], separators=(",", ":")))
    ids = iter(_numbers(out["ids"]))  # in the written jobs' order, then their messages'
    results: list[list[Enqueued]] = [[] for _ in batch]
    for n in _numbers(out["written"]):
        messages = batch[n - 1][1]
        results[n - 1] = [Enqueued(next(ids), message) for message in messages]
    return results


def _numbers(text: str | None) -> list[int]:
    """A statement's comma-separated integers (NULL for none: ``submit_jobs``)."""
    return [int(n) for n in text.split(",")] if text else []


class GroupCommit:
    max_batch = 64  # jobs in one statement: well within one request's size; more wait for the next
    wait_s = 1.0  # a caller queued this long behind a statement in flight (a lock, a dead link) goes alone

    def __init__(self, db: Database, committed: Callable[[list[Enqueued]], None] = lambda rows: None,
                 hooks: StoreHooks | None = None):
        self._db = db
        self._committed = committed  # must not raise: the rows are committed whatever it does
        self.hooks = hooks if hooks is not None else StoreHooks()  # tests: "submit_jobs", called with the batch
        self._lock = threading.Lock()
        self._queue: deque[_Entry] = deque()
        self._leading = False  # a caller is writing a batch (the lead passes to the next in the queue)

    def write(self, job: Job, history: list[dict[str, Any]], messages: list[OutgoingMessage],
              now: datetime) -> list[Enqueued]:
        """Write one submission, in a batch with whatever else is queued; its outbox rows (already handed
        to ``committed``), or []."""
        entry = _Entry(submission_row(job, history, messages, now), messages)
        with self._lock:
            if self._leading:
                self._queue.append(entry)
            else:
                self._leading = entry.lead = True
        # Waiting takes no CPU and holds no lock: the leader hands over a result, the lead, or "go alone".
        if not entry.lead and not entry.done.wait(self.wait_s):
            with self._lock:
                if entry in self._queue:  # not taken yet: no batch of its own waits behind a stuck one
                    self._queue.remove(entry)
                    entry.alone = True
            if not entry.alone:
                entry.done.wait()  # in the batch in flight (its outcome is this job's), or handed the lead
        if entry.lead:
            self._lead(entry)
        if entry.error is not None:
            raise TransientError(f"{entry.error} (a submission written with this one)") from entry.error
        if entry.alone:
            with self._db.session() as session:
                entry.result = self._insert(session, [(entry.row, entry.messages)])[0]
            if entry.result:
                self._committed(entry.result)
        return entry.result

    def _insert(self, session: Session, batch: list[tuple[dict[str, Any], list[OutgoingMessage]]]
                ) -> list[list[Enqueued]]:
        if not self.hooks.active:
            return insert_queued_jobs(session, batch)
        self.hooks.run_before("submit_jobs", (batch,), {})
        results = insert_queued_jobs(session, batch)
        self.hooks.run_after("submit_jobs", results, (batch,), {})
        return results

    def _lead(self, own: _Entry) -> None:
        batch, written = [own], []
        try:
            with self._lock:
                while self._queue and len(batch) < self.max_batch:
                    batch.append(self._queue.popleft())
            with self._db.session() as session:
                results = self._insert(session, [(e.row, e.messages) for e in batch])
            for entry, result in zip(batch, results):
                entry.result = result
                written += result
        except TransientError as exc:  # Postgres unavailable: every job of the batch is redelivered
            for entry in batch[1:]:
                entry.error = exc
            raise
        except Exception:
            if len(batch) == 1:
                raise  # its own error, as the one-job statement raised it
            for entry in batch:
                entry.alone = True  # each writes its job again alone: one bad job fails only itself
        except BaseException:
            for entry in batch[1:]:
                entry.alone = True
            raise
        finally:
            with self._lock:
                nxt = self._queue.popleft() if self._queue else None
                self._leading = nxt is not None
            if nxt is not None:  # the next statement is written meanwhile
                nxt.lead = True
                nxt.done.set()
            try:
                if written:
                    self._committed(written)
            finally:
                for entry in batch[1:]:
                    entry.done.set()
