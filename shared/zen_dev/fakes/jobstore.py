"""An in-memory job store (``zen.jobs.store.JobStore``) for tests: the job service runs on it unchanged,
in microseconds per message, with no Postgres. Units of work never overlap, so a race is injected as
its outcome through ``hooks`` (``StoreHooks``), and ``hooks.fail_next`` raises as Postgres would.

What it keeps of the Postgres adapter's semantics and what it does not model: docs/how-to/test.md,
"the job store port".
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from datetime import datetime, timedelta
from typing import Any, Callable, Iterator

from zen.core.models import Job, JobStatus
from zen.jobs.outgoing import Enqueued, OutgoingMessage
from zen.jobs.store import StoreHooks
from zen_dev.fakes.jobrows import REJECTIONS_KEEP_S, InMemoryJobTx, Tables, fresh

class InMemorySubmissions:
    """The group-commit writer's contract (``zen.jobs.store.SubmissionWriter``), one submission a unit of work."""

    def __init__(self, store: InMemoryJobStore, committed: Callable[[list[Enqueued]], None]):
        self._store = store
        self._committed = committed

    def write(self, job: Job, history: list[dict[str, Any]], messages: list[OutgoingMessage],
              now: datetime) -> list[Enqueued]:
        hooks, batch = self._store.hooks, [(job, messages)]  # a batch of one (the hook sees one entry)
        with self._store.transaction() as tx:
            if hooks.active:
                hooks.run_before("submit_jobs", (batch,), {})
            tables = self._store.tables
            written: list[Enqueued] = []
            if (job.job_id not in tables.jobs and not any(kept == job.job_id for kept, _ in tables.early_stops)
                    and not tx.array_tasks(job.job_id)):
                tables.jobs[job.job_id] = fresh(job, status=JobStatus.QUEUED, at=now, queued=True)
                for h in history:
                    tx.event(job.job_id, now, h["actor"], 1, h["from_status"], h["to_status"], h["reason"])
                written = [Enqueued(id_, m) for id_, m in zip(tx.add_outbox(messages, now), messages)]
            if hooks.active:
                hooks.run_after("submit_jobs", [written], (batch,), {})
        if written:
            self._committed(written)
        return written


class InMemoryJobStore:
    """A ``zen.jobs.store.JobStore`` in memory (the module docstring)."""

    def __init__(self) -> None:
        self.hooks = StoreHooks()
        self.tables = Tables()
        self._units = threading.RLock()  # one unit of work at a time; a hook's nested unit re-enters
        self._tick = threading.Lock()
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[InMemoryJobTx]:
        with self._units:
            snapshot = self.tables.copy()
            try:
                yield InMemoryJobTx(self)
            except BaseException:
                self.tables = snapshot
                raise

    def session(self) -> contextlib.AbstractContextManager[InMemoryJobTx]:
        return self.transaction()  # each call commits on its own; here, the block is one unit

    def submissions(self, committed: Callable[[list[Enqueued]], None]) -> InMemorySubmissions:
        return InMemorySubmissions(self, committed)

    @contextlib.contextmanager
    def tick_lock(self, key: int) -> Iterator[bool]:
        if not self._tick.acquire(blocking=False):
            yield False
            return
        try:
            yield True
        finally:
            self._tick.release()

    def prune_rejections(self, now: datetime) -> int:
        with self._units:
            cutoff = now - timedelta(seconds=REJECTIONS_KEEP_S)
            kept = [r for r in self.tables.rejections if (r["last_at"] or r["at"]) >= cutoff]
            gone = len(self.tables.rejections) - len(kept)
            self.tables.rejections = kept
            return gone

    # -- seeding (tests) ----------------------------------------------------------------------
    def put_job(self, job: Job) -> None:
        """Write a job row as another writer would have committed it (a race's outcome)."""
        with self._units:
            self.tables.jobs[job.job_id] = job

    def block_region(self, cluster: str, region: str, until: datetime, found_at: datetime | None = None,
                     booted_at: datetime | None = None) -> None:
        """The planner's memory: ``region`` of ``cluster`` stocked out until ``until`` (found so at
        ``found_at``, if given; a stockout a VM booted after, at ``booted_at``, is over)."""
        with self._units:
            self.tables.blocked[(cluster, region)] = until
            self.tables.stocked_out.pop((cluster, region), None)
            if found_at is not None and not (booted_at is not None and booted_at > found_at):
                self.tables.stocked_out[(cluster, region)] = found_at

    def room_for_gangs(self, cluster: str, pool: str, room: int, at: datetime) -> None:
        """The planner's memory: a gang assembling in ``pool`` of ``cluster`` could still get ``room`` VMs, as
        its pass at ``at`` found."""
        with self._units:
            self.tables.gang_rooms[(cluster, pool)] = (room, at)

    def drain_vm(self, vm: str) -> None:
        """A scale-down marked ``vm`` as going away."""
        with self._units:
            self.tables.drained = self.tables.drained | {vm}
