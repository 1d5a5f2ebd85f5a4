"""Rows of ``rejected_messages``: what Zen refused, and why (``JobService.reject``, ``zen rejected``):
once per message, once per repeat (a VM's report refused again for the same cause counts on its first
row), pruned by the scale tick after ``KEEP_S``, read a page at a time.

The rules and the retention: docs/reference/messages.md, "Rules".
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from zen.core.text import escape_unstorable

if TYPE_CHECKING:
    from zen.store.db import Database, Session

KEEP_S = 7 * 86_400.0
PRUNE_BATCH = 1000
PRUNE_BUDGET_S = 2.0


def _clean(text: str | None, limit: int = 2000) -> str | None:  # quoted text may hold NUL or surrogates
    return escape_unstorable(text, limit) if text is not None else None


def record(session: Session, *, source: str, message_id: str, job_id: str | None, reason: str,
           payload: bytes, now: datetime, key: str | None = None, principal: str | None = None,
           named_job_id: str | None = None) -> bool:
    """Record a rejected message: True when this wrote a new row (its first refusal), False when it was
    recorded already (the same message) or counted on the row of its repeat ``key``. ``named_job_id``: the job
    id it named, when the refusal is not that job's (``job_id`` None then: ``zen.jobs.rejections``)."""
    source, key = escape_unstorable(source, 2000), _clean(key, 400)
    if key is not None and session.one("repeat_rejected", source=source, repeat_key=key, now=now) is not None:
        return False
    row = session.one("insert_rejected", now=now, source=source, message_id=_clean(message_id),
                      job_id=_clean(job_id), named_job_id=_clean(named_job_id), reason=_clean(reason), repeat_key=key,
                      principal=_clean(principal),
                      payload=_clean(payload[:4096].decode("utf-8", errors="replace"), 8192))
    if row is None and key is not None:  # another instance wrote the key's first row meanwhile
        session.one("repeat_rejected", source=source, repeat_key=key, now=now)
    return row is not None


def last_seen(session: Session, source: str, key: str) -> datetime | None:
    """When a refusal of ``key`` was last recorded; None: never (or pruned)."""
    row = session.one("rejection_last_seen", source=_clean(source), repeat_key=_clean(key, 400))
    return row["seen"] if row else None


def page(session: Session, *, limit: int, before: int | None = None, payloads: bool = False,
         job_id: str | None = None) -> list[dict[str, Any]]:
    """At most ``limit`` rows, newest first, with ids below ``before`` (None: from the newest); only those naming
    ``job_id`` when it is given (as their job's, ``job_id``, or only named, ``named_job_id``)."""
    return session.run("page_rejected", limit=limit, before=before, payloads=payloads, job_id=job_id)


def prune(db: Database, now: datetime, keep_s: float = KEEP_S, batch: int = PRUNE_BATCH,
          budget_s: float = PRUNE_BUDGET_S) -> int:
    """Delete rows last seen more than ``keep_s`` before ``now``, ``batch`` a transaction, until a batch
    comes back short or ``budget_s`` is spent. Returns how many went."""
    cutoff, deleted, began = now - timedelta(seconds=keep_s), 0, time.monotonic()
    while True:
        with db.transaction() as session:
            went: int = session.one_row("prune_rejected", cutoff=cutoff, limit=batch)["deleted"]
        deleted += went
        if went < batch or time.monotonic() - began >= budget_s:
            return deleted
