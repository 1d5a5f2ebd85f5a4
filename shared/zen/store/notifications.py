"""Rows of ``notifications`` (migration 0025): the notifier's ledger of deliveries, one row per (job event,
target), over Postgres; the notifier's port is ``zen.jobs.notifications.Ledger``. Its queries are in
``notifications.sql``. Rows are kept ``KEEP_S`` and pruned by the notifier itself, a batch at a time.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from zen.core.models import Job
from zen.core.text import escape_unstorable
from zen.store import repository
from zen.store.db import load_queries

if TYPE_CHECKING:
    from zen.store.db import Database, Session

KEEP_S = 14 * 86_400.0
PRUNE_BATCH = 200
QUERIES = load_queries(Path(__file__).with_name("notifications.sql"))
Claim = Literal["mine", "done", "busy"]


def _run(session: Session, name: str, **params: Any) -> list[dict[str, Any]]:
    return session.sql(QUERIES[name], **params)


class PostgresNotifications:
    """The notifier's ledger: the job a notice is about, and each delivery's claim and outcome."""

    def __init__(self, db: Database):
        self._db = db

    def job(self, job_id: str) -> Job | None:
        with self._db.transaction() as session:
            return repository.get_job(session, job_id)

    def claim(self, key: str, *, job_id: str, attempt: int | None, event: str, target: str, now: datetime,
              hold_s: float, at: datetime | None = None, payload: dict[str, Any] | None = None) -> tuple[Claim, int]:
        """Take this delivery: "mine" (and its try number), "done" (sent or refused before) or "busy"
        (another delivery of the event holds it until its ``hold_s`` is up). ``at`` and ``payload``: the event's time
        and content, kept for ``before`` (neither: the row is not sent by a later notice's delivery)."""
        kept = json.dumps(payload) if payload is not None and at is not None else None
        if kept is not None and "\\u0000" in kept:  # jsonb holds no NUL: such an event is sent by its own deliveries only
            kept = None
        with self._db.transaction() as session:
            rows = _run(session, "claim_notification", key=key, job_id=job_id, attempt=attempt, event=event,
                        target=escape_unstorable(target, 2000), now=now, until=now + timedelta(seconds=hold_s),
                        at=at if kept is not None else None, payload=kept)
            if rows:
                return "mine", int(rows[0]["tries"])
            [state] = _run(session, "notification_state", key=key)
            return ("done" if state["state"] in ("sent", "refused") else "busy"), int(state["tries"])

    def settle(self, key: str, state: Literal["sent", "refused", "failed"], detail: str, now: datetime,
               tries: int) -> bool:
        """Record the outcome of the delivery whose claim was try ``tries``; False (nothing written) when a
        later delivery took the claim over meanwhile (this one outlived its hold): that one's outcome counts."""
        with self._db.transaction() as session:
            return bool(_run(session, "settle_notification", key=key, state=state,
                             detail=escape_unstorable(detail, 2000), now=now, tries=tries))

    def before(self, key: str, *, job_id: str, target: str, at: datetime, end: bool) -> list[dict[str, Any]]:
        """The job's notices to ``target`` before the one of ``key`` (of its event's time ``at``; ``end``: it is an
        end, which a preemption at the same time precedes) not sent yet, oldest first: key, state, payload."""
        with self._db.transaction() as session:
            return _run(session, "notifications_before", key=key, job_id=job_id, target=escape_unstorable(target, 2000),
                        at=at, end=end)

    def prune(self, now: datetime, keep_s: float = KEEP_S, limit: int = PRUNE_BATCH) -> None:
        with self._db.transaction() as session:
            _run(session, "prune_notifications", cutoff=now - timedelta(seconds=keep_s), limit=limit)


def of_job(session: Session, job_id: str) -> list[dict[str, Any]]:
    """A job's notifications, oldest first (tests, and what a `zen` command would show)."""
    return _run(session, "notifications_of_job", job_id=job_id)
