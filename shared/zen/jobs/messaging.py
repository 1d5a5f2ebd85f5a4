"""Outgoing messages: the publisher port and the outbox relay (the Pub/Sub adapter is ``zen.adapters.pubsub``).
Handlers never publish directly: they enqueue into the ``outbox`` table in the transaction of their
state change; after commit the relay publishes them, and the scale tick resends whatever is left, so
delivery is at least once. Urgent messages (starts, a VM's orders) are acknowledged before the
instance's last request in flight returns (``OutboxRelay.request``).

Why, and what it costs: docs/explanations/delivery-guarantees.md (the outbox) and
docs/benchmarks/control-plane.md (where the time went).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable, Iterator, Protocol, Sequence

from zen.jobs.outgoing import Enqueued, OutgoingMessage

if TYPE_CHECKING:  # the port (zen.jobs.store) names these types of this module
    from zen.jobs.store import JobStore, OutboxRows


log = logging.getLogger("zen.jobs.messaging")


class Publisher(Protocol):
    def publish(self, messages: Sequence[OutgoingMessage]) -> list[str | Exception]:
        """Publish and wait; returns, per message, its id or the exception that stopped it."""

    def publish_soon(self, messages: Sequence[OutgoingMessage],
                     done: Callable[[list[str | Exception]], None], *, linger_s: float = 0.0) -> None:
        """Hand the messages over and return; ``done(results)`` is called once all are settled. With
        ``linger_s``, they may wait that long to share an RPC with messages handed over after them
        (a publisher that lingers also has ``hurry()``: send what lingers now)."""


def enqueue(rows: OutboxRows, messages: Sequence[OutgoingMessage], now: datetime) -> list[Enqueued]:
    """Add messages to the outbox in one statement, inside the caller's unit of work."""
    if not messages:
        return []
    ids = rows.add_outbox(messages, now)  # ids follow the list's order
    return [Enqueued(id_, message) for id_, message in zip(ids, messages)]


class SentMarks:
    """Outbox rows published but not yet marked sent. They are marked in batches, a moment later, off
    the request's path, with an asynchronous commit: losing a mark (a crash) only means the tick
    sends that message once more, which at-least-once delivery allows."""

    def __init__(self, store: JobStore, clock: Callable[[], datetime], delay_s: float = 0.2):
        self._store = store
        self._clock = clock
        self._delay_s = delay_s
        self._ids: list[int] = []
        self._failed: list[tuple[int, Exception]] = []
        self._lock = threading.Lock()
        self._writing = threading.Lock()  # one write of marks at a time: a flush waits for one under way
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
        """Write the marks recorded so far; a write under way (the timer's) is waited for first, so that what the
        tick then reads as unsent is unsent: it took the rows the timer held, not yet written, for lost, and sent
        them all again (seen under load: a tick right after a burst resent eleven messages)."""
        with self._writing:
            with self._lock:
                ids, self._ids = self._ids, []
                failed, self._failed = self._failed, []
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = None
            if not ids and not failed:
                return
            try:
                with self._store.transaction() as rows:
                    _mark(rows, ids, failed, self._clock(), durable=False)
            except Exception as exc:  # noqa: BLE001 - at worst the tick sends a message once more
                log.warning("could not mark outbox rows", extra={"error": str(exc), "rows": len(ids) + len(failed)})


class OutboxRelay:
    """Publishes outbox rows and marks them sent.

    Right after a commit, ``flush_quietly`` publishes what the transaction enqueued, from memory (no
    read back). ``urgent`` topics (a job's start, a VM's orders) are acknowledged before the
    instance's last request in flight returns (module docstring, ``request``). The others (job
    events, notifications for users) are handed over first, without waiting, so their RPC runs
    beside the urgent one; while other requests are in flight (the CPU stays allocated) they may
    linger ``events_linger_s`` to share one RPC with the next submissions' events, and urgent ones
    ``urgent_linger_s`` (a request alone sends its urgent ones at once and waits). The last request
    out waits for every hand-over (a linger ends when it leaves), so nothing handed over is left on an
    instance whose CPU is about to be throttled. How each publish ended is recorded in the background
    (``SentMarks``). ``flush_pending`` (the scale tick) sends what is left: rows whose publish failed,
    and rows older than ``in_flight_s`` (their process died, or its CPU was throttled, between commit
    and publish). Younger rows may be in flight in another instance, so the tick leaves them alone.
    """

    in_flight_s = 60.0
    keep_sent_s = 86_400.0
    events_linger_s = 0.05  # concurrent submissions: one RPC of events per 50 ms, not one each
    # Concurrent submissions' starts share one RPC per 10 ms rather than one per RPC round trip (each
    # RPC cost a busy instance ~0.3 ms of CPU: at 4 requests in flight, 0.4 start RPCs a submission
    # were a fifth of its CPU). 10 ms is nothing beside a VM's claim (two Pub/Sub hops) or a boot.
    urgent_linger_s = 0.01
    prune_batch = 5000
    prune_budget_s = 5.0  # of a tick spent deleting old sent rows (more is left for the next)

    def __init__(self, store: JobStore, publisher: Publisher, clock: Callable[[], datetime],
                 urgent: frozenset[str] = frozenset()):
        self._store, self._publisher, self._clock, self._urgent = store, publisher, clock, urgent
        self.marks = SentMarks(store, clock)
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

    def publish_now(self, messages: Sequence[OutgoingMessage]) -> list[str | Exception]:
        """Publish outside the outbox and wait: per message its id, or what stopped it (never raises)."""
        try:
            return self._publisher.publish(messages)
        except Exception as exc:  # noqa: BLE001 - said per message, as the publisher does
            return [exc] * len(messages)

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
            self._hand_over(urgent, self.urgent_linger_s)

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
        with self._store.transaction() as tx:
            rows = tx.unsent_outbox(now - timedelta(seconds=self.in_flight_s), limit)
            if not rows:
                return 0
            results = self._publisher.publish([row.message for row in rows])
            sent = [row.id for row, result in zip(rows, results) if not isinstance(result, Exception)]
            _mark(tx, sent, [(row.id, result) for row, result in zip(rows, results)
                             if isinstance(result, Exception)], self._clock())
            return len(sent)

    def _prune(self, cutoff: datetime) -> None:
        """Delete rows sent before ``cutoff``, a batch per transaction, until a batch comes back short
        or ``prune_budget_s`` is spent: one batch a tick fell behind above ~50 submissions a second."""
        began = time.monotonic()
        while time.monotonic() - began < self.prune_budget_s:
            with self._store.transaction() as tx:
                if tx.prune_outbox(cutoff, self.prune_batch) < self.prune_batch:
                    return


def _mark(rows: OutboxRows, sent: list[int], failed: list[tuple[int, Exception]], now: datetime, *,
          durable: bool = True) -> None:
    """Record how publishing outbox rows ended: sent, or failed (left for the tick, with the error)."""
    if sent:
        rows.mark_outbox_sent(sent, now, durable=durable)
    for id_, error in failed:
        rows.mark_outbox_failed(id_, f"{type(error).__name__}: {error}")
    if failed:  # what stopped them, on the line the outbox alert's runbook sends operators to
        errors = sorted({f"{type(error).__name__}: {error}" for _, error in failed})
        log.warning("outbox publish failed for %d message(s); left for the next tick", len(failed),
                    extra={"error": "; ".join(errors)[:2000]})
