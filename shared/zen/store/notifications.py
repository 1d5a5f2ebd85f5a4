"""Rows of ``notifications`` (migration 0025): the notifier's ledger of deliveries, one row per (job event,
target), over Postgres; and of ``notification_endpoints`` (migration 0059): the targets that gave no answer
lately. The notifier's port is ``zen.jobs.notifications.Ledger``. Its queries are in ``notifications.sql``.
Rows are kept ``KEEP_S`` (an endpoint's, ``ENDPOINT_KEEP_S``) and pruned by the notifier itself.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, TypeVar

from zen.core.models import Job
from zen.core.text import escape_unstorable
from zen.store import repository
from zen.store.db import load_queries, sqlstate

if TYPE_CHECKING:
    from zen.store.db import Database, Session

KEEP_S = 14 * 86_400.0
ENDPOINT_KEEP_S = 86_400.0
PRUNE_BATCH = 200
QUERIES = load_queries(Path(__file__).with_name("notifications.sql"))
Claim = Literal["mine", "done", "busy"]
Gate = Literal["open", "probe", "wait"]
T = TypeVar("T")
# notification_endpoints not granted to the notifier yet (migration 0059 applied, db_grants_sql not run again since),
# or not made yet: its notices are sent as before it, each POST tried (``PostgresNotifications._endpoints``)
NOT_YET = ("42501", "42P01")
log = logging.getLogger("zen.notify")


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

    def gate(self, endpoint: str, now: datetime, hold_s: float) -> tuple[Gate, datetime | None]:
        """May a delivery POST to ``endpoint`` now: "open" (it answered last), "probe" (it gave no answer lately, its
        while is over: this delivery tries it, the others wait until its answer or the returned end of its hold) or
        "wait" (until the returned time)."""
        endpoint = escape_unstorable(endpoint, 2000)

        def read(session: Session) -> tuple[Gate, datetime | None]:
            if not _run(session, "endpoint_state", endpoint=endpoint):
                return "open", None
            until = now + timedelta(seconds=hold_s)
            if _run(session, "take_endpoint_probe", endpoint=endpoint, now=now, until=until):
                return "probe", until
            if not (rows := _run(session, "endpoint_state", endpoint=endpoint)):  # it answered meanwhile
                return "open", None
            return "wait", max(rows[0]["retry_at"], rows[0]["probe_until"] or rows[0]["retry_at"])

        opened: tuple[Gate, datetime | None] = ("open", None)
        return self._endpoints(read, opened)

    def stalled(self, endpoint: str, now: datetime, first_s: float = 10, most_s: float = 300) -> datetime | None:
        """A POST to ``endpoint`` got no answer: when it may be tried again (``first_s`` after its first stall,
        doubling with each to ``most_s``; None: not kept, ``_endpoints``)."""
        def stall(session: Session) -> datetime | None:
            [row] = _run(session, "endpoint_stalled", endpoint=escape_unstorable(endpoint, 2000), now=now,
                         first_s=float(first_s), most_s=float(most_s))
            retry_at: datetime = row["retry_at"]
            return retry_at

        return self._endpoints(stall, None)

    def answered(self, endpoint: str) -> None:
        """The endpoint answered (any status): its notices are POSTed again as they come."""
        self._endpoints(lambda session: _run(session, "endpoint_answered", endpoint=escape_unstorable(endpoint, 2000)),
                        None)

    def untried(self, endpoint: str, until: datetime) -> None:
        """The delivery that ``gate`` let try the endpoint (its hold ending ``until``) sent nothing: another may."""
        self._endpoints(lambda session: _run(session, "endpoint_untried", endpoint=escape_unstorable(endpoint, 2000),
                                             until=until), None)

    def _endpoints(self, work: Callable[[Session], T], otherwise: T) -> T:
        """``work`` on notification_endpoints in a transaction of its own; ``otherwise`` while the notifier may not
        use that table (``NOT_YET``: an upgrade whose ``db_grants_sql`` is not run again yet): every POST is then
        tried, as before migration 0059, where each delivery failed until the grants were run."""
        try:
            with self._db.transaction() as session:
                return work(session)
        except Exception as exc:  # noqa: BLE001 - re-raised unless it is the grant's (or the table's) absence
            if sqlstate(exc) not in NOT_YET:
                raise
            log.warning("notification_endpoints cannot be used: every target is tried; run db_grants_sql again",
                        extra={"error": str(exc)[:300]})
            return otherwise

    def prune(self, now: datetime, keep_s: float = KEEP_S, limit: int = PRUNE_BATCH) -> None:
        with self._db.transaction() as session:
            _run(session, "prune_notifications", cutoff=now - timedelta(seconds=keep_s), limit=limit)
        self._endpoints(lambda session: _run(session, "prune_notification_endpoints",
                                             cutoff=now - timedelta(seconds=ENDPOINT_KEEP_S)), None)


def of_job(session: Session, job_id: str) -> list[dict[str, Any]]:
    """A job's notifications, oldest first (tests, and what a `zen` command would show)."""
    return _run(session, "notifications_of_job", job_id=job_id)
