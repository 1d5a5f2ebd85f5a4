"""Outgoing messages: the publisher port, its Pub/Sub adapter, an in-memory one, and the outbox relay.

Handlers never publish directly. They ``enqueue`` messages into the ``outbox`` table in the same
transaction as their state change; after commit, ``OutboxRelay.flush(ids)`` publishes those rows and
marks them sent. Whatever is left (publish failed, process died between commit and publish) is sent
by ``OutboxRelay.flush_pending()`` on the next scale tick. Delivery is therefore at least once;
every consumer is idempotent on ``(job_id, attempt, ...)``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Protocol, Sequence

from zen.models import Message
from zen.store.db import Database, Session, to_json

log = logging.getLogger("zen.messaging")


@dataclass(frozen=True)
class OutgoingMessage:
    topic: str  # short name, e.g. "zen-job-start"
    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)


class Publisher(Protocol):
    """Publishes a batch; returns, per message, its id or the exception that stopped it."""

    def publish(self, messages: Sequence[OutgoingMessage]) -> list[str | Exception]: ...


class PubSubPublisher:
    """Adapter over ``google.cloud.pubsub_v1.PublisherClient`` (honours ``PUBSUB_EMULATOR_HOST``)."""

    def __init__(self, project: str, client=None, timeout_s: float = 30.0):
        from google.cloud import pubsub_v1

        self._project = project
        self._client = client or pubsub_v1.PublisherClient()
        self._timeout_s = timeout_s

    def publish(self, messages: Sequence[OutgoingMessage]) -> list[str | Exception]:
        futures = [
            self._client.publish(self._client.topic_path(self._project, m.topic), m.data, **m.attributes)
            for m in messages
        ]
        results: list[str | Exception] = []
        for future in futures:
            try:
                results.append(future.result(timeout=self._timeout_s))
            except Exception as exc:  # noqa: BLE001 - reported per message, retried by the relay
                results.append(exc)
        return results


class RecordingPublisher:
    """In-memory publisher for tests and the scripted demo; ``fail_next`` injects failures."""

    def __init__(self) -> None:
        self.sent: list[OutgoingMessage] = []
        self.fail_next = 0
        self._lock = threading.Lock()

    def publish(self, messages: Sequence[OutgoingMessage]) -> list[str | Exception]:
        results: list[str | Exception] = []
        with self._lock:
            for message in messages:
                if self.fail_next > 0:
                    self.fail_next -= 1
                    results.append(ConnectionError("injected publish failure"))
                    continue
                self.sent.append(message)
                results.append(str(len(self.sent)))
        return results

    def on(self, topic: str) -> list[OutgoingMessage]:
        with self._lock:
            return [m for m in self.sent if m.topic == topic]


def enqueue(session: Session, topic: str, message: Message, attributes: dict[str, str], now: datetime) -> int:
    """Add a message to the outbox, inside the caller's transaction. Returns its outbox id."""
    row = session.one("insert_outbox", topic=topic, data=message.to_bytes(), attributes=to_json(attributes), now=now)
    return row["id"]


class OutboxRelay:
    """Publishes outbox rows and marks them sent. Safe to run concurrently (rows are locked)."""

    def __init__(self, db: Database, publisher: Publisher, clock: Callable[[], datetime]):
        self._db = db
        self._publisher = publisher
        self._clock = clock

    def flush(self, ids: Sequence[int]) -> int:
        """Publish these rows (right after the commit that wrote them). Returns how many were sent."""
        if not ids:
            return 0
        with self._db.transaction() as session:
            return self._send(session, session.run("lock_outbox_ids", ids=list(ids)))

    def flush_pending(self, limit: int = 1000) -> int:
        """Publish whatever is still unsent (the scale tick's duty). Returns how many were sent."""
        with self._db.transaction() as session:
            return self._send(session, session.run("lock_outbox_unsent", limit=limit))

    def flush_quietly(self, ids: Sequence[int]) -> int:
        """``flush``, but a failure only logs: the rows stay in the outbox for the next tick."""
        try:
            return self.flush(ids)
        except Exception as exc:  # noqa: BLE001 - state is committed; the tick resends
            log.warning("publish after commit failed; the next tick resends", extra={"error": str(exc)})
            return 0

    def _send(self, session: Session, rows: list[dict]) -> int:
        if not rows:
            return 0
        messages = [OutgoingMessage(r["topic"], bytes(r["data"]), dict(r["attributes"] or {})) for r in rows]
        results = self._publisher.publish(messages)
        sent = [row["id"] for row, result in zip(rows, results) if not isinstance(result, Exception)]
        for row, result in zip(rows, results):
            if isinstance(result, Exception):
                session.run("mark_outbox_failed", id=row["id"], error=f"{type(result).__name__}: {result}"[:1000])
        if sent:
            session.run("mark_outbox_sent", ids=sent, now=self._clock())
        failed = len(rows) - len(sent)
        if failed:
            log.warning("outbox publish failed for %d message(s); left for the next tick", failed)
        return len(sent)
