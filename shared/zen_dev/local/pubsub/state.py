"""Topics, subscriptions and publishing of the Pub/Sub stand-in (pure logic, injectable clock): every
resource and message under one lock, housekeeping done lazily by each operation, delivery left to the
``delivery`` it holds. It knows nothing about gRPC: failures raise :class:`~.resources.PubSubError`.

How: docs/reference/simulator.md, "The Pub/Sub stand-in".
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from google.protobuf import timestamp_pb2
from google.pubsub_v1 import types as T

from . import resources as R
from .backlog import Entry, SubscriptionQueue
from .delivery import Delivery, LiveSubscription
from .filters import FilterError, parse_filter

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
SUBSCRIPTION_PATHS = {
    "ack_deadline_seconds", "message_retention_duration", "expiration_policy",
    "dead_letter_policy", "retry_policy", "labels", "retain_acked_messages", "push_config",
    "bigquery_config", "cloud_storage_config", "bigtable_config",
    "enable_exactly_once_delivery", "message_transforms",
}
IMMUTABLE_SUBSCRIPTION_PATHS = {"name", "topic", "filter", "enable_message_ordering"}
TOPIC_PATHS = {
    "labels", "message_retention_duration", "message_storage_policy", "schema_settings",
    "kms_key_name", "ingestion_data_source_settings", "message_transforms",
}


_MESSAGE_PB = T.PubsubMessage.pb()  # the raw protobuf class under T.PubsubMessage


def _raw(message):
    """The raw protobuf of a message given raw or as proto-plus (no copy)."""
    return message if type(message) is _MESSAGE_PB else T.PubsubMessage.pb(message)


def _timestamp(now: float) -> timestamp_pb2.Timestamp:
    """``now`` as proto-plus stores a datetime: microsecond precision, then whole nanos."""
    when = dt.datetime.fromtimestamp(now, tz=dt.timezone.utc)
    return timestamp_pb2.Timestamp(seconds=int(when.timestamp()), nanos=when.microsecond * 1000)


def _clone(message):
    return type(message).deserialize(type(message).serialize(message))


@dataclass(eq=False)
class _Topic:
    resource: T.Topic
    subscriptions: set[str] = field(default_factory=set)


class PubSubState:
    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.clock = clock or time.time
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._topics: dict[str, _Topic] = {}
        self._subs: dict[str, LiveSubscription] = {}
        self._seq = itertools.count(1)
        # A tick visits the subscriptions given messages since their backlog was last empty (in the order they
        # were made), and all only from the earliest one may expire (activity only delays it): idle ones cost nothing.
        self._made, self._expiry_due = itertools.count(), float("inf")
        self._loaded: dict[LiveSubscription, int] = {}
        self._closed = False
        self.delivery = Delivery(self)  # pull, acks, streams

    # --- what delivery sees (``delivery.Subscriptions``) -------------------------------------

    @property
    def cond(self) -> threading.Condition:
        return self._cond

    @property
    def closed(self) -> bool:
        return self._closed

    def is_current(self, sub: LiveSubscription) -> bool:
        return self._subs.get(sub.resource.name) is sub

    # --- housekeeping ----------------------------------------------------------------------

    def tick(self) -> float:
        now = self.clock()
        changed = False
        if now >= self._expiry_due:
            self._expiry_due = float("inf")
            for sub in list(self._subs.values()):
                if sub.streams:
                    sub.last_active = now
                elif sub.ttl is not None and now - sub.last_active >= sub.ttl:
                    self._drop_subscription(sub)
                    changed = True
                    continue
                self._expires(sub)
        for sub in sorted(self._loaded, key=self._loaded.__getitem__):
            if not sub.queue:  # emptied, dropped or detached
                del self._loaded[sub]
                continue
            changed |= sub.queue.drop_old(now) > 0
            expired, dead = sub.queue.expire_leases(now)
            changed |= expired > 0
            for entry in dead:
                self.dead_letter(sub, entry, now)
        if changed:
            self._cond.notify_all()
        return now

    def _expires(self, sub: LiveSubscription) -> None:  # the earliest it may expire, kept in _expiry_due
        if sub.ttl is not None:
            self._expiry_due = min(self._expiry_due, sub.last_active + sub.ttl)

    def wake(self) -> None:
        """Re-check time-based rules now (e.g. after advancing an injected clock)."""
        with self._lock:
            self.tick()
            self._cond.notify_all()

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            self._cond.notify_all()

    # --- lookups ---------------------------------------------------------------------------

    def _topic(self, name: str) -> _Topic:
        R.check_topic_name(name)
        topic = self._topics.get(name)
        if topic is None:
            raise R.not_found(name)
        return topic

    def subscription(self, name: str) -> LiveSubscription:
        R.check_subscription_name(name)
        sub = self._subs.get(name)
        if sub is None:
            raise R.not_found(name)
        return sub

    @staticmethod
    def _page(names: Iterable[str], page_size: int, token: str) -> tuple[list[str], str]:
        ordered = sorted(names)
        size = DEFAULT_PAGE_SIZE if page_size <= 0 else min(page_size, MAX_PAGE_SIZE)
        start = 0
        if token:
            try:
                after = base64.urlsafe_b64decode(token.encode()).decode()
            except (ValueError, UnicodeDecodeError):
                raise R.invalid(f"Invalid page token {token!r}.") from None
            start = next((i for i, n in enumerate(ordered) if n > after), len(ordered))
        page = ordered[start:start + size]
        more = start + size < len(ordered)
        next_token = base64.urlsafe_b64encode(page[-1].encode()).decode() if more else ""
        return page, next_token

    # --- topics ----------------------------------------------------------------------------

    def create_topic(self, topic: T.Topic) -> T.Topic:
        R.check_topic_name(topic.name)
        R.reject_unsupported_topic(topic)
        with self._lock:
            self.tick()
            if topic.name in self._topics:
                raise R.already_exists(topic.name)
            stored = _clone(topic)
            stored.state = T.Topic.State.ACTIVE
            self._topics[topic.name] = _Topic(stored)
            return _clone(stored)

    def get_topic(self, name: str) -> T.Topic:
        with self._lock:
            self.tick()
            return _clone(self._topic(name).resource)

    def update_topic(self, topic: T.Topic, paths: list[str]) -> T.Topic:
        if not paths:
            raise R.invalid("The update_mask must name at least one field.")
        with self._lock:
            self.tick()
            current = self._topic(topic.name)
            updated = _clone(current.resource)
            for path in paths:
                if path not in TOPIC_PATHS:
                    raise R.invalid(f"Invalid update_mask path {path!r} for a topic.")
                self._copy_field(topic, updated, path)
            R.reject_unsupported_topic(updated)
            current.resource = updated
            return _clone(updated)

    def list_topics(self, project: str, page_size: int, token: str) -> tuple[list[T.Topic], str]:
        R.check_project(project)
        with self._lock:
            self.tick()
            names = [n for n in self._topics if n.startswith(project + "/topics/")]
            page, next_token = self._page(names, page_size, token)
            return [_clone(self._topics[n].resource) for n in page], next_token

    def list_topic_subscriptions(
        self, name: str, page_size: int, token: str
    ) -> tuple[list[str], str]:
        with self._lock:
            self.tick()
            return self._page(self._topic(name).subscriptions, page_size, token)

    def delete_topic(self, name: str) -> None:
        with self._lock:
            self.tick()
            topic = self._topic(name)
            for sub_name in topic.subscriptions:
                self._subs[sub_name].resource.topic = R.DELETED_TOPIC
            del self._topics[name]

    def publish(self, name: str, messages: Iterable) -> list[str]:
        """Publish raw ``PubsubMessage`` protobufs (proto-plus ones are accepted too)."""
        raw = [_raw(message) for message in messages]
        R.check_messages(raw)
        with self._lock:
            now = self.tick()
            topic = self._topic(name)
            ids = self._publish(topic, raw, now)
            self._cond.notify_all()
            return ids

    def _publish(self, topic: _Topic, messages: list, now: float) -> list[str]:
        """Give each raw message an id and a copy to every subscription whose filter matches."""
        seqs = [next(self._seq) for _ in messages]
        ids = [str(seq) for seq in seqs]
        if not topic.subscriptions:
            return ids  # nobody receives them
        subs = [self._subs[sub_name] for sub_name in topic.subscriptions]
        publish_time = _timestamp(now)
        for seq, message_id, message in zip(seqs, ids, messages):
            stored = _MESSAGE_PB(
                data=message.data,
                attributes=message.attributes,
                ordering_key=message.ordering_key,
                message_id=message_id,
                publish_time=publish_time,
            )
            size = stored.ByteSize()
            wrapped = T.PubsubMessage.wrap(stored)
            attributes = dict(message.attributes)
            for sub in subs:
                if sub.matcher.matches(attributes):
                    sub.queue.add(seq, wrapped, size, now)
                    self._loaded.setdefault(sub, sub.born)
        return ids

    def dead_letter(self, sub: LiveSubscription, entry: Entry, now: float) -> None:
        target = self._topics.get(sub.resource.dead_letter_policy.dead_letter_topic)
        if target is None:
            return  # dead-letter topic deleted since: the message is dropped, as in GCP
        original = entry.message
        attributes = dict(original.attributes)
        attributes.update({
            "CloudPubSubDeadLetterSourceDeliveryCount": str(entry.failures),
            "CloudPubSubDeadLetterSourceSubscription": R.short_id(sub.resource.name),
            "CloudPubSubDeadLetterSourceSubscriptionProject": R.project_of(sub.resource.name),
            "CloudPubSubDeadLetterSourceTopicPublishTime": original.publish_time.isoformat(),
        })
        forwarded = _MESSAGE_PB(
            data=original.data, attributes=attributes, ordering_key=original.ordering_key
        )
        self._publish(target, [forwarded], now)

    # --- subscriptions ---------------------------------------------------------------------

    @staticmethod
    def _copy_field(source, target, path: str) -> None:
        if path in source:
            setattr(target, path, getattr(source, path))
        else:
            type(target).pb(target).ClearField(path)

    def _configure(self, sub: T.Subscription) -> dict:
        """Validate a subscription resource and fill in server defaults (mutates ``sub``)."""
        R.reject_unsupported_subscription(sub)
        sub.ack_deadline_seconds = R.check_ack_deadline(sub.ack_deadline_seconds)
        retention = R.retention_of(sub)
        sub.message_retention_duration = dt.timedelta(seconds=retention)
        ttl = R.expiration_ttl_of(sub)
        if "expiration_policy" not in sub:
            sub.expiration_policy = T.ExpirationPolicy(ttl=dt.timedelta(seconds=ttl))
        attempts = R.max_attempts_of(sub)
        if attempts is not None:
            self._topic(sub.dead_letter_policy.dead_letter_topic)
            sub.dead_letter_policy.max_delivery_attempts = attempts
        backoff = R.backoff_of(sub)
        if backoff is not None:
            sub.retry_policy = T.RetryPolicy(
                minimum_backoff=dt.timedelta(seconds=backoff[0]),
                maximum_backoff=dt.timedelta(seconds=backoff[1]),
            )
        sub.state = T.Subscription.State.ACTIVE
        return {"retention": retention, "ttl": ttl, "max_attempts": attempts, "backoff": backoff}

    def create_subscription(self, request: T.Subscription) -> T.Subscription:
        R.check_subscription_name(request.name)
        if not request.topic:
            raise R.invalid("A subscription needs a topic.")
        R.check_topic_name(request.topic)
        try:
            matcher = parse_filter(request.filter)
        except FilterError as exc:
            raise R.invalid(str(exc)) from None
        with self._lock:
            now = self.tick()
            if request.name in self._subs:
                raise R.already_exists(request.name)
            R.check_room_on_topic(request.topic, len((topic := self._topic(request.topic)).subscriptions))
            resource = _clone(request)
            config = self._configure(resource)
            queue = SubscriptionQueue(
                secrets.token_hex(4),
                ordered=resource.enable_message_ordering,
                max_attempts=config["max_attempts"],
                backoff=config["backoff"],
                retention=config["retention"],
            )
            sub = self._subs[request.name] = LiveSubscription(resource, queue, matcher, resource.ack_deadline_seconds,
                                                              config["ttl"], now, next(self._made))
            self._expires(sub)
            topic.subscriptions.add(request.name)
            return _clone(resource)

    def get_subscription(self, name: str) -> T.Subscription:
        with self._lock:
            self.tick()
            return _clone(self.subscription(name).resource)

    def update_subscription(self, request: T.Subscription, paths: list[str]) -> T.Subscription:
        if not paths:
            raise R.invalid("The update_mask must name at least one field.")
        with self._lock:
            self.tick()
            sub = self.subscription(request.name)
            updated = _clone(sub.resource)
            for path in paths:
                if path in IMMUTABLE_SUBSCRIPTION_PATHS:
                    raise R.invalid(f"The field {path!r} of a subscription cannot be updated.")
                if path not in SUBSCRIPTION_PATHS:
                    raise R.invalid(f"Invalid update_mask path {path!r} for a subscription.")
                self._copy_field(request, updated, path)
            config = self._configure(updated)
            sub.resource = updated
            sub.ack_deadline = updated.ack_deadline_seconds
            sub.ttl = config["ttl"]
            self._expires(sub)
            sub.queue.retention = config["retention"]
            sub.queue.max_attempts = config["max_attempts"]
            sub.queue.backoff = config["backoff"]
            self._cond.notify_all()
            return _clone(updated)

    def list_subscriptions(
        self, project: str, page_size: int, token: str
    ) -> tuple[list[T.Subscription], str]:
        R.check_project(project)
        with self._lock:
            self.tick()
            names = [n for n in self._subs if n.startswith(project + "/subscriptions/")]
            page, next_token = self._page(names, page_size, token)
            return [_clone(self._subs[n].resource) for n in page], next_token

    def delete_subscription(self, name: str) -> None:
        with self._lock:
            self.tick()
            self._drop_subscription(self.subscription(name))
            self._cond.notify_all()

    def _drop_subscription(self, sub: LiveSubscription) -> None:
        del self._subs[sub.resource.name]
        topic = self._topics.get(sub.resource.topic)
        if topic is not None:
            topic.subscriptions.discard(sub.resource.name)
        sub.queue.clear()

    def detach_subscription(self, name: str) -> None:
        with self._lock:
            self.tick()
            sub = self.subscription(name)
            topic = self._topics.get(sub.resource.topic)
            if topic is not None:
                topic.subscriptions.discard(name)
            sub.resource.detached = True
            sub.queue.clear()
            self._cond.notify_all()
