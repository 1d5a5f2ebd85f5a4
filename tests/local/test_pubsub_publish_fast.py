"""The Pub/Sub stand-in's Publish path, which works on raw protobufs: what a subscriber receives
(every field of the stored message), message ids, and the exact validation errors."""

from __future__ import annotations

import datetime as dt
import queue

import pytest
from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1
from google.protobuf import timestamp_pb2
from google.pubsub_v1 import types as T

from zen_dev.local.pubsub import PubSubStandIn
from zen_dev.local.pubsub import resources as R
from zen_dev.local.pubsub.state import PubSubState

PROJECT = "projects/zen-test"
TOPIC = f"{PROJECT}/topics/events"
DEAD = f"{PROJECT}/topics/dead"
SUB = f"{PROJECT}/subscriptions/sub-1"
WAIT = 10.0
START = 1_750_000_000.1234567  # sub-microsecond part: publish_time keeps microseconds
MessagePb = T.PubsubMessage.pb()


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def _expected(data, attributes, ordering_key, message_id, now) -> MessagePb:
    when = dt.datetime.fromtimestamp(now, tz=dt.timezone.utc)
    return MessagePb(
        data=data, attributes=attributes, ordering_key=ordering_key, message_id=message_id,
        publish_time=timestamp_pb2.Timestamp(
            seconds=int(when.timestamp()), nanos=when.microsecond * 1000
        ),
    )


@pytest.fixture
def state():
    s = PubSubState(Clock())
    s.create_topic(T.Topic(name=TOPIC))
    return s


def test_pulled_message_carries_every_published_field_and_nothing_else(state) -> None:
    state.create_subscription(T.Subscription(name=SUB, topic=TOPIC))
    raw = MessagePb(data=b"d1", attributes={"a": "1", "b": ""}, ordering_key="k")
    plus = T.PubsubMessage(data=b"", attributes={"only": "attrs"})  # proto-plus still accepted
    client_set = MessagePb(data=b"d3", message_id="client", publish_time={"seconds": 5})
    ids = state.publish(TOPIC, [raw, plus, client_set])
    assert ids == ["1", "2", "3"]
    got = {r.message.message_id: T.PubsubMessage.pb(r.message) for r in state.delivery.pull(SUB, 10)}
    assert got == {
        "1": _expected(b"d1", {"a": "1", "b": ""}, "k", "1", START),
        "2": _expected(b"", {"only": "attrs"}, "", "2", START),
        "3": _expected(b"d3", {}, "", "3", START),  # client's id and time are replaced
    }
    assert got["1"].publish_time.nanos == 123457000
    assert raw == MessagePb(data=b"d1", attributes={"a": "1", "b": ""}, ordering_key="k")


def test_ids_are_global_and_failed_requests_use_none(state) -> None:
    other = f"{PROJECT}/topics/other"
    state.create_topic(T.Topic(name=other))
    assert state.publish(TOPIC, [MessagePb(data=b"x")] * 2) == ["1", "2"]  # no subscription
    with pytest.raises(R.PubSubError):
        state.publish(other, [MessagePb(data=b"x"), MessagePb()])
    assert state.publish(other, [MessagePb(data=b"y")]) == ["3"]


def test_filters_see_published_attributes_and_do_not_change_them(state) -> None:
    subs = {
        "eq": 'attributes.kind = "a"',
        "ne": 'attributes.missing != "x"',
        "has": "attributes:kind",
        "prefix": 'hasPrefix(attributes.kind, "b")',
    }
    for name, text in subs.items():
        state.create_subscription(
            T.Subscription(name=f"{PROJECT}/subscriptions/f-{name}", topic=TOPIC, filter=text)
        )
    state.publish(TOPIC, [
        MessagePb(data=b"1", attributes={"kind": "a"}),
        MessagePb(data=b"2", attributes={"kind": "bb"}),
        MessagePb(data=b"3"),
    ])
    pulled = {
        name: {r.message.data: dict(r.message.attributes)
               for r in state.delivery.pull(f"{PROJECT}/subscriptions/f-{name}", 10)}
        for name in subs
    }
    assert pulled == {
        "eq": {b"1": {"kind": "a"}},
        "ne": {b"1": {"kind": "a"}, b"2": {"kind": "bb"}, b"3": {}},
        "has": {b"1": {"kind": "a"}, b"2": {"kind": "bb"}},
        "prefix": {b"2": {"kind": "bb"}},
    }


def test_dead_lettered_copy_is_a_new_message_with_source_attributes(state) -> None:
    state.create_topic(T.Topic(name=DEAD))
    dead_sub = f"{PROJECT}/subscriptions/dead-1"
    state.create_subscription(T.Subscription(name=dead_sub, topic=DEAD))
    state.create_subscription(T.Subscription(
        name=SUB, topic=TOPIC,
        dead_letter_policy={"dead_letter_topic": DEAD, "max_delivery_attempts": 5},
    ))
    state.publish(TOPIC, [MessagePb(data=b"poison", attributes={"o": "t"}, ordering_key="k")])
    for _ in range(5):
        [received] = state.delivery.pull(SUB, 10)
        state.clock.now += 1.5
        state.delivery.modify_ack_deadline(SUB, [received.ack_id], 0)
    [dead] = state.delivery.pull(dead_sub, 10)
    first = received.message.publish_time
    assert T.PubsubMessage.pb(dead.message) == _expected(b"poison", {
        "o": "t",
        "CloudPubSubDeadLetterSourceDeliveryCount": "5",
        "CloudPubSubDeadLetterSourceSubscription": "sub-1",
        "CloudPubSubDeadLetterSourceSubscriptionProject": "zen-test",
        "CloudPubSubDeadLetterSourceTopicPublishTime": first.isoformat(),
    }, "k", "2", START + 7.5)


def _error(state, messages, topic=TOPIC) -> tuple[str, str]:
    with pytest.raises(R.PubSubError) as info:
        state.publish(topic, messages)
    return info.value.code, info.value.message


def test_validation_errors(state) -> None:
    bad = "INVALID_ARGUMENT"
    assert _error(state, []) == (bad, "The request must contain at least one message.")
    assert _error(state, [MessagePb(data=b"x"), MessagePb(ordering_key="k")]) == (
        bad, "Some messages are empty: a message needs data or attributes.")
    many = {f"k{i}": "v" for i in range(101)}
    assert _error(state, [MessagePb(attributes=many)]) == (
        bad, "A message can have at most 100 attributes.")
    assert _error(state, [MessagePb(attributes={"": "v"})]) == (
        bad, "Attribute keys must not be empty.")
    assert _error(state, [MessagePb(attributes={"k" * 257: "v"})]) == (
        bad, f"Attribute key {'k' * 32!r}... exceeds 256 bytes.")
    assert _error(state, [MessagePb(attributes={"big": "é" * 513})]) == (
        bad, "Attribute 'big' value exceeds 1024 bytes.")
    assert _error(state, [MessagePb(data=b"x", ordering_key="é" * 513)]) == (
        bad, "Ordering keys are limited to 1024 bytes.")
    assert state.publish(TOPIC, [MessagePb(attributes={"k" * 256: "v" * 1024})]) == ["1"]
    # the request limit counts the serialized messages: 1 tag + 4 length bytes + data
    limit = R.MAX_PUBLISH_BYTES - 5
    assert state.publish(TOPIC, [MessagePb(data=b"x" * limit)]) == ["2"]
    assert _error(state, [MessagePb(data=b"x" * (limit + 1))]) == (
        bad, "The publish request exceeds 10485760 bytes.")
    assert _error(state, [MessagePb(data=b"x" * (limit // 2))] * 2 + [MessagePb(data=b"x")]) == (
        bad, "The publish request exceeds 10485760 bytes.")
    # messages are checked before the topic is looked up
    missing = f"{PROJECT}/topics/missing"
    assert _error(state, [], missing)[0] == bad
    assert _error(state, [MessagePb(data=b"x")], missing) == (
        "NOT_FOUND", "Resource not found (resource=missing).")


# --- through gRPC and the official client ------------------------------------------------------


@pytest.fixture
def standin(monkeypatch):
    clock = Clock()
    server = PubSubStandIn(clock=clock).start()
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", server.address)
    try:
        yield server
    finally:
        server.stop(grace=0)


@pytest.mark.filterwarnings("ignore:The \"api\" property:DeprecationWarning")
def test_official_client_publish_pull_and_streaming_pull(standin) -> None:
    publisher = pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
    )
    subscriber = pubsub_v1.SubscriberClient()
    try:
        publisher.create_topic(name=TOPIC)
        subscriber.create_subscription(request={"name": SUB, "topic": TOPIC})
        streamed = f"{PROJECT}/subscriptions/streamed"
        subscriber.create_subscription(request={"name": streamed, "topic": TOPIC})
        response = publisher.api.publish(topic=TOPIC, messages=[
            {"data": b"one", "attributes": {"a": "1"}, "ordering_key": "k"},
            {"data": b"", "attributes": {"b": "2"}},
        ])
        assert list(response.message_ids) == ["1", "2"]
        assert publisher.publish(TOPIC, b"three", ordering_key="k", c="3").result(WAIT) == "3"
        expected = {
            "1": _expected(b"one", {"a": "1"}, "k", "1", START),
            "2": _expected(b"", {"b": "2"}, "", "2", START),
            "3": _expected(b"three", {"c": "3"}, "k", "3", START),
        }
        pulled = subscriber.pull(subscription=SUB, max_messages=10).received_messages
        assert {r.message.message_id: T.PubsubMessage.pb(r.message) for r in pulled} == expected

        got: queue.Queue = queue.Queue()

        def callback(message) -> None:
            got.put(message)
            message.ack()

        future = subscriber.subscribe(streamed, callback)
        try:
            messages = [got.get(timeout=WAIT) for _ in range(3)]
        finally:
            future.cancel()
        assert {m.message_id: (m.data, dict(m.attributes), m.ordering_key) for m in messages} == {
            i: (e.data, dict(e.attributes), e.ordering_key) for i, e in expected.items()
        }
        assert {m.publish_time for m in messages} == {
            dt.datetime.fromtimestamp(START, tz=dt.timezone.utc)
        }
        with pytest.raises(gexc.InvalidArgument, match="Attribute keys must not be empty"):
            publisher.api.publish(topic=TOPIC, messages=[{"attributes": {"": "v"}}])
        with pytest.raises(gexc.NotFound):
            publisher.api.publish(topic=f"{PROJECT}/topics/missing", messages=[{"data": b"x"}])
    finally:
        publisher.stop()
        publisher.transport.close()
        subscriber.close()
