"""Message delivery of the Pub/Sub stand-in: Pull, Acknowledge, ModifyAckDeadline, StreamingPull.

:class:`Delivery` is the delivery half of the stand-in, a collaborator that :class:`~.state.PubSubState`
holds (``state.delivery``) and that sees the state only as a :class:`Subscriptions`: leasing messages to
pulls and streams, parsing ack ids, acks, deadline changes and nacks (including the dead lettering
they trigger), and the blocking wait of a StreamingPull stream, which sleeps on the state's
condition variable for at most ``MAX_WAIT`` seconds at a time and honours the stream's
``max_outstanding_messages`` / ``max_outstanding_bytes``. Every method that touches state takes the
state's lock (its condition's); helpers starting with ``_`` expect it held.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

from google.pubsub_v1 import types as T

from . import resources as R
from .backlog import Entry, StreamBudget, SubscriptionQueue

MAX_WAIT = 0.5  # longest a StreamingPull waiter sleeps before re-checking (seconds)
MAX_PULL_MESSAGES = 1000
# The official clients reach an emulator on a plain gRPC channel, which takes responses of 4 MiB at most: a
# response is kept under that (room left for ack ids), and Pub/Sub may return fewer messages than asked for.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024 - 256 * 1024


@dataclass(eq=False)
class LiveSubscription:
    """One subscription as the state holds it: its resource, its backlog and its open streams."""

    resource: T.Subscription
    queue: SubscriptionQueue
    matcher: object
    ack_deadline: int
    ttl: float | None
    last_active: float
    born: int = 0  # its place among the state's subscriptions, in the order they were made
    streams: set["Stream"] = field(default_factory=set)


@dataclass(eq=False)
class Stream:
    """One StreamingPull connection as the state sees it."""

    sub: LiveSubscription
    budget: StreamBudget
    closed: bool = False
    error: R.PubSubError | None = None


class Subscriptions(Protocol):
    """What delivery needs of the state that owns the subscriptions (``PubSubState``)."""

    clock: Callable[[], float]

    @property
    def cond(self) -> threading.Condition: ...  # its lock guards every resource and message

    @property
    def closed(self) -> bool: ...  # shut down: streams end

    def tick(self) -> float: ...  # housekeeping first (lock held); returns now

    def subscription(self, name: str) -> LiveSubscription: ...  # NOT_FOUND when there is none

    def is_current(self, sub: LiveSubscription) -> bool: ...  # not deleted (or replaced) since

    def dead_letter(self, sub: LiveSubscription, entry: Entry, now: float) -> None: ...


class Delivery:
    """Pull-side operations over the state's subscriptions."""

    def __init__(self, state: Subscriptions) -> None:
        self._state = state

    def _receivable(self, name: str, now: float) -> LiveSubscription:
        sub = self._state.subscription(name)
        if sub.resource.detached:
            raise R.PubSubError("FAILED_PRECONDITION", f"Subscription {name} is detached.")
        sub.last_active = now
        return sub

    def _received(self, sub: LiveSubscription, entries: list[Entry]) -> list[T.ReceivedMessage]:
        return [
            T.ReceivedMessage(
                ack_id=sub.queue.ack_id(e),
                message=e.message,
                delivery_attempt=sub.queue.delivery_attempt(e),
            )
            for e in entries
        ]

    def pull(self, name: str, max_messages: int) -> list[T.ReceivedMessage]:
        if max_messages <= 0:
            raise R.invalid("max_messages must be greater than 0.")
        with self._state.cond:
            now = self._state.tick()
            sub = self._receivable(name, now)
            count = min(max_messages, MAX_PULL_MESSAGES)
            taken = sub.queue.take(now, count, None, sub.ack_deadline, response_bytes=MAX_RESPONSE_BYTES)
            return self._received(sub, taken)

    def _parse_ack_id(self, sub: LiveSubscription, ack_id: str) -> tuple[int, int] | None:
        parts = ack_id.split("-")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            raise R.invalid(f"Invalid ack ID {ack_id!r}.")
        if parts[0] != sub.queue.uid:
            return None  # from another (or an earlier) subscription: ignored
        return int(parts[1]), int(parts[2])

    def _acknowledge(self, sub: LiveSubscription, ack_ids: Iterable[str]) -> None:
        parsed = [self._parse_ack_id(sub, a) for a in ack_ids]
        acked = [sub.queue.ack(*p) for p in parsed if p is not None]
        if any(acked):
            self._state.cond.notify_all()

    def _modify(
        self, sub: LiveSubscription, ack_ids: Iterable[str], deadlines: Iterable[int], now: float
    ) -> None:
        pairs = list(zip(ack_ids, deadlines))
        for _, seconds in pairs:
            R.check_modify_deadline(seconds)
        parsed = [(self._parse_ack_id(sub, a), s) for a, s in pairs]
        nacked = False
        for ids, seconds in parsed:
            if ids is None:
                continue
            changed, dead = sub.queue.modify(ids[0], ids[1], seconds, now)
            nacked |= changed and seconds == 0
            if dead is not None:
                self._state.dead_letter(sub, dead, now)
        if nacked:
            self._state.cond.notify_all()

    def acknowledge(self, name: str, ack_ids: list[str]) -> None:
        if not ack_ids:
            raise R.invalid("ack_ids must not be empty.")
        with self._state.cond:
            now = self._state.tick()
            sub = self._state.subscription(name)
            sub.last_active = now
            self._acknowledge(sub, ack_ids)

    def modify_ack_deadline(self, name: str, ack_ids: list[str], seconds: int) -> None:
        if not ack_ids:
            raise R.invalid("ack_ids must not be empty.")
        R.check_modify_deadline(seconds)
        with self._state.cond:
            now = self._state.tick()
            sub = self._state.subscription(name)
            sub.last_active = now
            self._modify(sub, ack_ids, [seconds] * len(ack_ids), now)

    # --- streaming pull --------------------------------------------------------------------

    def open_stream(self, first: T.StreamingPullRequest) -> Stream:
        if not first.subscription:
            raise R.invalid("The first StreamingPullRequest must name the subscription.")
        deadline = R.check_ack_deadline(first.stream_ack_deadline_seconds, allow_zero_default=False)
        with self._state.cond:
            now = self._state.tick()
            sub = self._receivable(first.subscription, now)
            budget = StreamBudget(
                first.max_outstanding_messages, first.max_outstanding_bytes, deadline
            )
            stream = Stream(sub, budget)
            sub.streams.add(stream)
            self._apply(stream, first, now)
            return stream

    def stream_request(self, stream: Stream, request: T.StreamingPullRequest) -> None:
        """Apply a later request of the stream; errors are kept for the stream to report."""
        with self._state.cond:
            now = self._state.tick()
            try:
                if request.subscription:
                    raise R.invalid("subscription may only be set on the first request.")
                if request.max_outstanding_messages or request.max_outstanding_bytes:
                    raise R.invalid("Flow control may only be set on the first request.")
                if request.stream_ack_deadline_seconds:
                    stream.budget.ack_deadline = R.check_ack_deadline(
                        request.stream_ack_deadline_seconds
                    )
                if self._state.is_current(stream.sub):
                    self._apply(stream, request, now)
            except R.PubSubError as exc:
                stream.error = exc
            self._state.cond.notify_all()

    def _apply(self, stream: Stream, request: T.StreamingPullRequest, now: float) -> None:
        if len(request.modify_deadline_ack_ids) != len(request.modify_deadline_seconds):
            raise R.invalid("modify_deadline_ack_ids and modify_deadline_seconds differ in length.")
        stream.sub.last_active = now
        if request.ack_ids:
            self._acknowledge(stream.sub, request.ack_ids)
        if request.modify_deadline_ack_ids:
            self._modify(
                stream.sub, request.modify_deadline_ack_ids, request.modify_deadline_seconds, now
            )

    def next_batch(self, stream: Stream) -> T.StreamingPullResponse | None:
        """Block until messages can be sent on ``stream``; None once it is closed."""
        with self._state.cond:
            while True:
                now = self._state.tick()
                if self._state.closed or stream.closed:
                    return None
                if stream.error is not None:
                    raise stream.error
                sub = stream.sub
                if not self._state.is_current(sub):
                    raise R.not_found(sub.resource.name)
                if sub.resource.detached:
                    raise R.PubSubError("FAILED_PRECONDITION", "The subscription was detached.")
                room = stream.budget.room()
                if room is not None:
                    budget = stream.budget
                    taken = sub.queue.take(now, room[0], room[1], budget.ack_deadline, budget, MAX_RESPONSE_BYTES)
                    if taken:
                        return T.StreamingPullResponse(
                            received_messages=self._received(sub, taken),
                            subscription_properties={
                                "message_ordering_enabled": sub.resource.enable_message_ordering
                            },
                        )
                event = sub.queue.next_event(now)
                wait = MAX_WAIT if event is None else min(MAX_WAIT, event - now)
                self._state.cond.wait(max(wait, 0.005))

    def close_stream(self, stream: Stream) -> None:
        with self._state.cond:
            stream.closed = True
            stream.sub.streams.discard(stream)
            stream.sub.last_active = self._state.clock()
            self._state.cond.notify_all()
