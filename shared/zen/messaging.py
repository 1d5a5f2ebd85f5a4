"""Outgoing messages: the publisher port, its Pub/Sub adapter, and the outbox relay.

Handlers never publish directly. They ``enqueue`` messages into the ``outbox`` table in the same
transaction as their state change; after commit, ``OutboxRelay.flush_quietly`` publishes them and
they are marked sent. Whatever is left (publish failed, process died between commit and publish) is
sent by ``OutboxRelay.flush_pending()`` on the next scale tick. Delivery is therefore at least once;
every consumer is idempotent on ``(job_id, attempt, ...)``.

Messages that make work happen (a job's start, a VM's orders) must be acknowledged by Pub/Sub before
the instance's last request in flight returns: on Cloud Functions the instance's CPU is throttled
once no request is in flight, so a message merely handed over could sit there until the next
request, and a job's start with it. While other requests are in flight the CPU stays allocated, so a
handler hands its urgent messages over and returns; the last one out waits for whatever is still
being published (``OutboxRelay.request``). Job events never hold a request that others follow, but
the last one out waits for them too; the marking of rows as sent never holds a request.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import math
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable, Iterator, Protocol, Sequence

from zen.models import Message
from zen.store import outbox

if TYPE_CHECKING:  # the service needs only the interface; the driver loads in the adapter
    from zen.store.db import Database, Session


log = logging.getLogger("zen.messaging")


@dataclass(frozen=True)
class OutgoingMessage:
    topic: str  # short name, e.g. "zen-job-start"
    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)


class Publisher(Protocol):
    def publish(self, messages: Sequence[OutgoingMessage]) -> list[str | Exception]:
        """Publish and wait; returns, per message, its id or the exception that stopped it."""

    def publish_soon(self, messages: Sequence[OutgoingMessage],
                     done: Callable[[list[str | Exception]], None], *, linger_s: float = 0.0) -> None:
        """Hand the messages over and return; ``done(results)`` is called once all are settled. With
        ``linger_s``, they may wait that long to share an RPC with messages handed over after them
        (a publisher that lingers also has ``hurry()``: send what lingers now)."""


class _Lane:
    """One topic's sender, group-commit style: a caller that finds the lane idle sends its messages
    in one ``Publish`` RPC from its own thread (no hand-off, no delay); messages that arrive while an
    RPC is in flight, or that are handed over without waiting (``publish_soon``), queue up and share
    the next RPC, which the lane's sender thread sends. The sender is started once and then waits on
    a condition (no CPU, no lock held) until there is something to send: starting a thread per
    hand-off cost ~0.5 ms of a submission's CPU. Messages handed over with a linger (job events,
    while other requests are in flight: ``OutboxRelay``) wait until the earliest one is due, so that
    concurrent submissions share one RPC for their events instead of one RPC each (an RPC costs this process ~0.3 ms of CPU, a submission's own
    work ~0.4 ms); a message due now, or a full batch, ends the wait."""

    max_batch = 500  # Pub/Sub allows 1,000 messages and 10 MB per request
    max_bytes = 8 * 1024 * 1024  # of data and attributes: room for the request's own fields

    def __init__(self, send: Callable[[list[OutgoingMessage]], list[str] | Exception]):
        self._send = send
        self._pending: list[tuple[OutgoingMessage, Callable[[str | Exception], None]]] = []
        self._due = math.inf  # monotonic time by which the queue must be sent
        self._busy = False  # an RPC is in flight, or the sender is about to send the queue
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._handed_over = False  # the sender has work (guarded by the lock)
        self._sender: threading.Thread | None = None

    def submit(self, items: list[tuple[OutgoingMessage, Callable[[str | Exception], None]]], *,
               inline: bool, linger_s: float = 0.0) -> None:
        """Queue ``items``; with ``inline``, an idle lane sends them from the caller's thread; with
        ``linger_s``, queued ones may wait that long for company."""
        with self._lock:
            if not (inline and not self._busy):
                self._pending.extend(items)
                due = time.monotonic() + linger_s
                if due < self._due:
                    self._due = due
                    self._wake.notify()  # a sender lingering for later messages sends sooner
                if not self._busy:
                    self._busy = True
                    self._hand_over()
                return  # the sender (or the caller with an RPC in flight) takes them next
            self._busy = True
        while items:
            count = self._fitting(items)
            self._send_batch(items[:count])
            items = items[count:]
        with self._lock:
            if self._pending:
                self._hand_over()  # what queued meanwhile goes with the sender; the lane stays busy
            else:
                self._busy = False

    def hurry(self) -> None:
        """What lingers is due now."""
        with self._lock:
            if self._pending and self._due > time.monotonic():
                self._due = time.monotonic()
                self._wake.notify()

    def _fitting(self, items: list[tuple[OutgoingMessage, Callable[[str | Exception], None]]]) -> int:
        """How many of ``items``, from the first, one Publish request can carry (at least one: a
        single message is limited by the submission's own size limit). A batch over Pub/Sub's limits
        would fail whole, and the tick would resend the same oldest rows, failing again."""
        size = 0
        for count, (message, _) in enumerate(items[:self.max_batch]):
            size += len(message.data) + sum(len(k) + len(v) for k, v in message.attributes.items())
            if count and size > self.max_bytes:
                return count
        return min(len(items), self.max_batch)

    def _send_batch(self, batch: list[tuple[OutgoingMessage, Callable[[str | Exception], None]]]) -> None:
        """Send and settle every item, whatever raises: a dead sender would strand its topic."""
        try:
            outcome = self._send([message for message, _ in batch])
        except Exception as exc:  # noqa: BLE001 - reported per message; the relay leaves them for the tick
            outcome = exc
        for position, (_, settle) in enumerate(batch):
            try:
                settle(outcome if isinstance(outcome, Exception) else outcome[position])
            except Exception:  # noqa: BLE001 - one caller's callback must not stop the others
                log.exception("a publish callback failed")

    def _hand_over(self) -> None:
        """Wake the sender (started on first use); the caller holds the lock."""
        self._handed_over = True
        if self._sender is None:
            self._sender = threading.Thread(target=self._run, name="zen-publish", daemon=True)
            self._sender.start()
        self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._handed_over:
                    self._wake.wait()
                self._handed_over = False
                while len(self._pending) < self.max_batch and (wait := self._due - time.monotonic()) > 0:
                    self._wake.wait(wait)  # lingering: no CPU, the lock released
            self._drain()

    def _drain(self) -> None:
        while True:
            with self._lock:
                count = self._fitting(self._pending)
                batch, self._pending = self._pending[:count], self._pending[count:]
                if not self._pending:
                    self._due = math.inf
                if not batch:
                    self._busy = False
                    return
            self._send_batch(batch)


class PubSubPublisher:
    """Adapter over the official Pub/Sub client (honours ``PUBSUB_EMULATOR_HOST``).

    Publishes with the client's ``Publish`` RPC, one sender lane per topic (``_Lane``), rather than
    through the client's batching layer, which adds a batching delay (10 ms by default), a thread
    per batch and a future per message to every wait (measured against the stand-in: 8.8 ms for a
    submission's three messages, against 3.4 ms with plain RPCs). A failed RPC is tried once more;
    what still fails is reported per message, and the relay leaves it for the tick.
    """

    def __init__(self, project: str, client=None, timeout_s: float = 30.0):
        from google.cloud import pubsub_v1

        self._project = project
        self._client = client or pubsub_v1.PublisherClient()
        self._timeout_s = timeout_s
        self._lanes: dict[str, _Lane] = {}
        self._lanes_lock = threading.Lock()

    def publish(self, messages: Sequence[OutgoingMessage]) -> list[str | Exception]:
        settled = threading.Event()
        outcome: list[list[str | Exception]] = []

        def done(results: list[str | Exception]) -> None:
            outcome.append(results)
            settled.set()

        self._submit(messages, done, inline=True)
        if not settled.wait(timeout=2 * self._timeout_s + 5):
            return [TimeoutError("not settled in time")] * len(messages)  # the tick resends them
        return outcome[0]

    def publish_soon(self, messages: Sequence[OutgoingMessage],
                     done: Callable[[list[str | Exception]], None], *, linger_s: float = 0.0) -> None:
        self._submit(messages, done, inline=False, linger_s=linger_s)

    def hurry(self) -> None:
        """Messages lingering in any lane are sent now."""
        with self._lanes_lock:
            lanes = list(self._lanes.values())
        for lane in lanes:
            lane.hurry()

    def _submit(self, messages: Sequence[OutgoingMessage], done: Callable[[list[str | Exception]], None], *,
                inline: bool, linger_s: float = 0.0) -> None:
        """Queue each message on its topic's lane; ``done(results)`` once every one is settled."""
        if not messages:
            done([])
            return
        results: list[str | Exception] = [RuntimeError("not published")] * len(messages)
        remaining = [len(messages)]
        lock = threading.Lock()

        def settle_at(index: int) -> Callable[[str | Exception], None]:
            def settle(result: str | Exception) -> None:
                results[index] = result
                with lock:
                    remaining[0] -= 1
                    last = remaining[0] == 0
                if last:
                    done(results)
            return settle

        by_topic: dict[str, list] = {}
        for index, message in enumerate(messages):
            by_topic.setdefault(message.topic, []).append((message, settle_at(index)))
        for topic, items in by_topic.items():
            self._lane(topic).submit(items, inline=inline, linger_s=linger_s)

    def _lane(self, topic: str) -> _Lane:
        with self._lanes_lock:
            lane = self._lanes.get(topic)
            if lane is None:
                lane = self._lanes[topic] = _Lane(lambda batch: self._publish_topic(topic, batch))
            return lane

    def _publish_topic(self, topic: str, messages: list[OutgoingMessage]) -> list[str] | Exception:
        from google.pubsub_v1 import types

        # The transport's Publish callable: the RPC without the client layer's retry and timeout
        # wrappers, whose CPU a busy instance feels on every message (one retry is made here; what
        # still fails is resent by the tick).
        request = types.PublishRequest(
            topic=self._client.topic_path(self._project, topic),
            messages=[types.PubsubMessage(data=m.data, attributes=m.attributes) for m in messages])
        outcome: list[str] | Exception = RuntimeError("not published")
        for _ in range(2):
            try:
                return list(self._client.transport.publish(request, timeout=self._timeout_s).message_ids)
            except Exception as exc:  # noqa: BLE001 - reported per message, resent by the relay
                outcome = exc
        return outcome


@dataclass(frozen=True)
class Enqueued:
    """An outbox row: its id and the message it holds."""

    id: int
    message: OutgoingMessage


def outgoing(topic: str, message: Message, attributes: dict[str, str]) -> OutgoingMessage:
    return OutgoingMessage(topic, message.to_bytes(), attributes)


def outbox_json(messages: Sequence[OutgoingMessage]) -> str:
    """Messages as the JSON array the outbox statements read (one parameter, data in base64)."""
    return json.dumps([{"topic": m.topic, "data": base64.b64encode(m.data).decode("ascii"),
                        "attributes": m.attributes} for m in messages])


def enqueue(session: Session, messages: Sequence[OutgoingMessage], now: datetime) -> list[Enqueued]:
    """Add messages to the outbox in one statement, inside the caller's transaction."""
    if not messages:
        return []
    ids = outbox.insert(session, outbox_json(messages), now)  # ids follow the list's order
    return [Enqueued(id_, message) for id_, message in zip(ids, messages)]


class SentMarks:
    """Outbox rows published but not yet marked sent. They are marked in batches, a moment later, off
    the request's path, with an asynchronous commit: losing a mark (a crash) only means the tick
    sends that message once more, which at-least-once delivery allows."""

    def __init__(self, db: Database, clock: Callable[[], datetime], delay_s: float = 0.2):
        self._db = db
        self._clock = clock
        self._delay_s = delay_s
        self._ids: list[int] = []
        self._failed: list[tuple[int, Exception]] = []
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def add(self, enqueued: Sequence[Enqueued], results: Sequence[str | Exception]) -> None:
        """Record how the publish of these rows ended."""
        with self._lock:
            for row, result in zip(enqueued, results):
                if isinstance(result, Exception):
                    self._failed.append((row.id, result))
                else:
                    self._ids.append(row.id)
            if self._timer is None and (self._ids or self._failed):
                self._timer = threading.Timer(self._delay_s, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        with self._lock:
            ids, self._ids = self._ids, []
            failed, self._failed = self._failed, []
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None
        if not ids and not failed:
            return
        try:
            with self._db.transaction() as session:
                _mark(session, ids, failed, self._clock(), durable=False)
        except Exception as exc:  # noqa: BLE001 - at worst the tick sends a message once more
            log.warning("could not mark outbox rows", extra={"error": str(exc), "rows": len(ids) + len(failed)})


class OutboxRelay:
    """Publishes outbox rows and marks them sent.

    Right after a commit, ``flush_quietly`` publishes what the transaction enqueued, from memory (no
    read back). ``urgent`` topics (a job's start, a VM's orders) are acknowledged before the
    instance's last request in flight returns (module docstring, ``request``). The others (job
    events, notifications for users) are handed over first, without waiting, so their RPC runs
    beside the urgent one; while other requests are in flight (the CPU stays allocated) they may
    linger ``events_linger_s`` to share one RPC with the next submissions' events. The last request
    out waits for every hand-over (a linger ends when it leaves), so nothing handed over is left on an
    instance whose CPU is about to be throttled. How each publish ended is recorded in the background
    (``SentMarks``). ``flush_pending`` (the scale tick) sends what is left: rows whose publish failed,
    and rows older than ``in_flight_s`` (their process died, or its CPU was throttled, between commit
    and publish). Younger rows may be in flight in another instance, so the tick leaves them alone.
    """

    in_flight_s = 60.0
    keep_sent_s = 86_400.0
    events_linger_s = 0.05  # concurrent submissions: one RPC of events per 50 ms, not one each
    prune_batch = 5000
    prune_budget_s = 5.0  # of a tick spent deleting old sent rows (more is left for the next)

    def __init__(self, db: Database, publisher: Publisher, clock: Callable[[], datetime],
                 urgent: frozenset[str] = frozenset()):
        self._db, self._publisher, self._clock, self._urgent = db, publisher, clock, urgent
        self.marks = SentMarks(db, clock)
        self._flow = threading.Condition()
        self._in_flight = 0  # requests inside ``request()``
        self._unsettled: set[int] = set()  # hand-overs not settled yet (tokens: a late callback clears only its own)
        self._tokens = itertools.count()
        self.wait_limit_s = 30.0  # well within a function's timeout (60 s); past it the tick resends

    @contextmanager
    def request(self) -> Iterator[None]:
        """One function invocation. The last one out waits (no CPU, no lock held: a condition) until
        the messages handed over meanwhile are settled, or until another request arrives, which then
        inherits the duty."""
        with self._flow:
            self._in_flight += 1
            self._flow.notify_all()  # a request waiting to leave last hands the duty over
        try:
            yield
        finally:
            with self._flow:
                self._in_flight -= 1
                if self._in_flight == 0 and self._unsettled:
                    hurry = getattr(self._publisher, "hurry", None)
                    if hurry is not None:  # lingering events go now: nobody is left to share their RPC
                        hurry()
                    settled = self._flow.wait_for(lambda: not self._unsettled or self._in_flight,
                                                  timeout=self.wait_limit_s)
                    if not settled:  # lost callbacks must not make every later request wait: the tick resends
                        log.warning("publishes not settled in time; the tick resends them",
                                    extra={"unsettled": len(self._unsettled)})
                        self._unsettled.clear()  # only these: no request is in flight to have added more

    def _hand_over(self, rows: Sequence[Enqueued], linger_s: float = 0.0) -> None:
        """Publish without waiting; the request's exit waits for it (``request``)."""
        with self._flow:
            token = next(self._tokens)
            self._unsettled.add(token)

        def settled(results: list[str | Exception]) -> None:
            try:
                self.marks.add(rows, results)
            finally:
                with self._flow:
                    self._unsettled.discard(token)
                    self._flow.notify_all()

        try:
            self._publisher.publish_soon([e.message for e in rows], settled, linger_s=linger_s)
        except BaseException:
            with self._flow:
                self._unsettled.discard(token)
            raise

    def flush_quietly(self, enqueued: Sequence[Enqueued]) -> None:
        """Publish rows just committed; a failure only logs (the rows stay for the tick)."""
        urgent = [e for e in enqueued if e.message.topic in self._urgent]
        later = [e for e in enqueued if e.message.topic not in self._urgent]
        for rows, send in ((later, self._publish_later), (urgent, self._publish_urgent)):
            try:
                if rows:
                    send(rows)
            except Exception as exc:  # noqa: BLE001 - state is committed; the tick resends
                log.warning("publish after commit failed; the next tick resends", extra={"error": str(exc)})

    def _publish_urgent(self, urgent: Sequence[Enqueued]) -> None:
        with self._flow:
            alone = self._in_flight <= 1
        if alone:
            self.marks.add(urgent, self._publisher.publish([e.message for e in urgent]))
        else:
            self._hand_over(urgent)

    def _publish_later(self, later: Sequence[Enqueued]) -> None:
        with self._flow:  # alone, nobody would share the RPC: it goes at once
            linger_s = self.events_linger_s if self._in_flight > 1 else 0.0
        self._hand_over(later, linger_s)

    def flush_pending(self, limit: int = 1000) -> int:
        """Publish whatever is still unsent, and prune rows sent more than ``keep_sent_s`` ago (the
        scale tick's duty). Returns how many were sent."""
        self.marks.flush()
        now = self._clock()
        self._prune(now - timedelta(seconds=self.keep_sent_s))
        with self._db.transaction() as session:
            rows = outbox.unsent(session, now - timedelta(seconds=self.in_flight_s), limit)
            if not rows:
                return 0
            messages = [OutgoingMessage(r["topic"], bytes(r["data"]), dict(r["attributes"] or {})) for r in rows]
            results = self._publisher.publish(messages)
            sent = [row["id"] for row, result in zip(rows, results) if not isinstance(result, Exception)]
            _mark(session, sent, [(row["id"], result) for row, result in zip(rows, results)
                                  if isinstance(result, Exception)], self._clock())
            return len(sent)

    def _prune(self, cutoff: datetime) -> None:
        """Delete rows sent before ``cutoff``, a batch per transaction, until a batch comes back short
        or ``prune_budget_s`` is spent: one batch a tick fell behind above ~50 submissions a second."""
        began = time.monotonic()
        while time.monotonic() - began < self.prune_budget_s:
            with self._db.transaction() as session:
                if outbox.prune(session, cutoff, self.prune_batch) < self.prune_batch:
                    return


def _mark(session: Session, sent: list[int], failed: list[tuple[int, Exception]], now: datetime, *,
          durable: bool = True) -> None:
    """Record how publishing outbox rows ended: sent, or failed (left for the tick, with the error)."""
    if sent:
        outbox.mark_sent(session, sent, now, durable=durable)
    for id_, error in failed:
        outbox.mark_failed(session, id_, f"{type(error).__name__}: {error}")
    if failed:
        log.warning("outbox publish failed for %d message(s); left for the next tick", len(failed))
