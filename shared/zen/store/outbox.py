"""Rows of the ``outbox`` table (see ``zen.jobs.messaging`` for how they are published)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zen.store.db import Session


def insert(session: Session, messages_json: str, now: datetime) -> list[int]:
    """Messages (a JSON array: topic, base64 data, attributes) in one statement; their ids, in order."""
    return sorted(r["id"] for r in session.run("insert_outbox", messages=messages_json, now=now))


def unsent(session: Session, cutoff: datetime, limit: int) -> list[dict[str, Any]]:
    """Rows to resend, locked: failed publishes, and rows created before ``cutoff``."""
    return session.run("lock_outbox_unsent", cutoff=cutoff, limit=limit)


def mark_sent(session: Session, ids: list[int], now: datetime, *, durable: bool = True) -> None:
    """``durable=False`` commits asynchronously: a lost mark only means one more send."""
    if not durable:
        session.execute("SET LOCAL synchronous_commit TO OFF")
    session.run("mark_outbox_sent", ids=ids, now=now)


def mark_failed(session: Session, id_: int, error: str) -> None:
    session.run("mark_outbox_failed", id=id_, error=error[:1000])


def prune(session: Session, cutoff: datetime, limit: int = 5000) -> int:
    """Delete rows sent before ``cutoff``, at most ``limit`` of them; how many went."""
    deleted: int = session.one_row("prune_outbox", cutoff=cutoff, limit=limit)["deleted"]
    return deleted
