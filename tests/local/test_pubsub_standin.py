"""The local Pub/Sub stand-in, driven only through the official google-cloud-pubsub clients."""

from __future__ import annotations

import datetime as dt
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time

import pytest
from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1
from google.protobuf import field_mask_pb2
from google.pubsub_v1 import types as T

from zen_dev.local.pubsub import PubSubStandIn

PROJECT = "projects/zen-test"
WAIT = 30.0  # upper bound for anything asynchronous (a process start on a loaded 2-core machine took over 10 s)


class FakeClock:
    """Seconds since the epoch, moved only by ``advance``."""

    def __init__(self) -> None:
        self.now = 1_750_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Env:
    def __init__(self, standin: PubSubStandIn, clock: FakeClock) -> None:
        self.standin = standin
        self.clock = clock
        self.publisher = pubsub_v1.PublisherClient()
        self.subscriber = pubsub_v1.SubscriberClient()
        self._counter = 0

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.standin.wake()

    def name(self, kind: str) -> str:
        self._counter += 1
        return f"{PROJECT}/{kind}/{kind[:-1]}-{self._counter}"

    def topic(self) -> str:
        return self.publisher.create_topic(name=self.name("topics")).name

    def subscription(self, topic: str, **fields) -> str:
        return self.subscriber.create_subscription(
            request={"name": self.name("subscriptions"), "topic": topic, **fields}
        ).name

    def publish(self, topic: str, data: bytes = b"m", **attributes) -> str:
        return self.publisher.publish(topic, data, **attributes).result(timeout=WAIT)

    def pull(self, sub: str, max_messages: int = 100) -> list:
        return list(
            self.subscriber.pull(subscription=sub, max_messages=max_messages).received_messages
        )

    def ack(self, sub: str, received: list) -> None:
        if received:
            self.subscriber.acknowledge(subscription=sub, ack_ids=[r.ack_id for r in received])

    def modack(self, sub: str, received: list, seconds: int) -> None:
        self.subscriber.modify_ack_deadline(
            subscription=sub, ack_ids=[r.ack_id for r in received], ack_deadline_seconds=seconds
        )

    def close(self) -> None:
        self.publisher.stop()
        self.publisher.transport.close()
        self.subscriber.close()


@pytest.fixture
def env(monkeypatch):
    clock = FakeClock()
    standin = PubSubStandIn(clock=clock).start()
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", standin.address)
    environment = Env(standin, clock)
    try:
        yield environment
    finally:
        environment.close()
        standin.stop(grace=0)


def _data(received) -> list[bytes]:
    return [r.message.data for r in received]


def _wait_for(predicate, timeout: float = WAIT) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


# --- topics and subscriptions ----------------------------------------------------------------


def test_topic_lifecycle_and_errors(env: Env) -> None:
    pub = env.publisher
    names = [f"{PROJECT}/topics/t-{i}" for i in range(5)]
    for name in names:
        assert pub.create_topic(name=name).name == name
    assert pub.get_topic(topic=names[2]).name == names[2]
    pager = pub.list_topics(request={"project": PROJECT, "page_size": 2})
    pages = list(pager.pages)
    assert len(pages) == 3
    assert [t.name for page in pages for t in page.topics] == names
    assert [t.name for t in pub.list_topics(project="projects/other")] == []

    with pytest.raises(gexc.AlreadyExists, match=r"resource=t-0"):
        pub.create_topic(name=names[0])
    pub.delete_topic(topic=names[0])
    with pytest.raises(gexc.NotFound, match=r"Resource not found \(resource=t-0\)\."):
        pub.get_topic(topic=names[0])
    with pytest.raises(gexc.NotFound):
        pub.delete_topic(topic=names[0])
    with pytest.raises(gexc.NotFound):
        pub.publish(names[0], b"x").result(timeout=WAIT)
    for bad in ["ab", "1abc", "goog-topic", "has space", "a" * 256, "bad/slash"]:
        with pytest.raises(gexc.InvalidArgument, match="Invalid"):
            pub.create_topic(name=f"{PROJECT}/topics/{bad}")
    with pytest.raises(gexc.InvalidArgument):
        pub.create_topic(name="projects/p/subscriptions/abc")
    assert pub.create_topic(name=f"{PROJECT}/topics/A-b_c.d~e+f%g").name.endswith("A-b_c.d~e+f%g")

    updated = pub.update_topic(
        topic={"name": names[1], "labels": {"env": "dev"}},
        update_mask=field_mask_pb2.FieldMask(paths=["labels"]),
    )
    assert dict(updated.labels) == {"env": "dev"} == dict(pub.get_topic(topic=names[1]).labels)
    with pytest.raises(gexc.MethodNotImplemented, match="schemas"):
        pub.update_topic(
            topic={"name": names[1], "schema_settings": {"schema": "projects/p/schemas/s"}},
            update_mask=field_mask_pb2.FieldMask(paths=["schema_settings"]),
        )


def test_subscription_lifecycle_and_errors(env: Env) -> None:
    topic = env.topic()
    sub_client = env.subscriber
    name = f"{PROJECT}/subscriptions/first"
    created = sub_client.create_subscription(name=name, topic=topic)
    assert created.ack_deadline_seconds == 10
    assert created.message_retention_duration == dt.timedelta(days=7)
    assert created.expiration_policy.ttl == dt.timedelta(days=31)
    assert sub_client.get_subscription(subscription=name).topic == topic
    second = env.subscription(topic, ack_deadline_seconds=30, labels={"team": "zen"})
    got = sub_client.get_subscription(subscription=second)
    assert (got.ack_deadline_seconds, dict(got.labels)) == (30, {"team": "zen"})
    assert sorted(s.name for s in sub_client.list_subscriptions(project=PROJECT)) == sorted(
        [name, second]
    )
    assert sorted(env.publisher.list_topic_subscriptions(topic=topic)) == sorted([name, second])

    with pytest.raises(gexc.AlreadyExists):
        sub_client.create_subscription(name=name, topic=topic)
    with pytest.raises(gexc.NotFound, match=r"resource=nope"):
        sub_client.create_subscription(
            name=f"{PROJECT}/subscriptions/other", topic=f"{PROJECT}/topics/nope"
        )
    with pytest.raises(gexc.InvalidArgument):
        sub_client.create_subscription(name=f"{PROJECT}/subscriptions/x", topic=topic)
    for deadline in (5, 601):
        with pytest.raises(gexc.InvalidArgument, match="ack deadline"):
            env.subscription(topic, ack_deadline_seconds=deadline)
    with pytest.raises(gexc.InvalidArgument, match="Invalid filter"):
        env.subscription(topic, filter='attributes.a = "x" AND')
    with pytest.raises(gexc.InvalidArgument, match="max_delivery_attempts"):
        env.subscription(
            topic, dead_letter_policy={"dead_letter_topic": topic, "max_delivery_attempts": 3}
        )
    with pytest.raises(gexc.NotFound):
        env.subscription(topic, dead_letter_policy={"dead_letter_topic": f"{PROJECT}/topics/gone"})
    with pytest.raises(gexc.InvalidArgument, match="message_retention_duration"):
        env.subscription(topic, message_retention_duration=dt.timedelta(minutes=5))

    sub_client.delete_subscription(subscription=name)
    with pytest.raises(gexc.NotFound):
        sub_client.get_subscription(subscription=name)
    with pytest.raises(gexc.NotFound):
        sub_client.delete_subscription(subscription=name)
    with pytest.raises(gexc.NotFound):
        env.pull(name)
    env.publisher.delete_topic(topic=topic)
    assert sub_client.get_subscription(subscription=second).topic == "_deleted-topic_"

    topic = env.topic()
    detached = env.subscription(topic)
    env.publish(topic)
    env.publisher.detach_subscription(request={"subscription": detached})
    assert sub_client.get_subscription(subscription=detached).detached
    assert detached not in env.publisher.list_topic_subscriptions(topic=topic)
    with pytest.raises(gexc.FailedPrecondition):
        env.pull(detached)


def test_update_subscription(env: Env) -> None:
    topic, dead = env.topic(), env.topic()
    sub = env.subscription(topic)
    update = env.subscriber.update_subscription(
        subscription={
            "name": sub,
            "ack_deadline_seconds": 42,
            "message_retention_duration": dt.timedelta(hours=1),
            "expiration_policy": {"ttl": dt.timedelta(days=2)},
            "dead_letter_policy": {"dead_letter_topic": dead, "max_delivery_attempts": 7},
            "retry_policy": {"minimum_backoff": dt.timedelta(seconds=1)},
            "labels": {"ignored": "not in mask"},
        },
        update_mask=field_mask_pb2.FieldMask(
            paths=[
                "ack_deadline_seconds", "message_retention_duration", "expiration_policy",
                "dead_letter_policy", "retry_policy",
            ]
        ),
    )
    got = env.subscriber.get_subscription(subscription=sub)
    assert got == update
    assert got.ack_deadline_seconds == 42
    assert got.message_retention_duration == dt.timedelta(hours=1)
    assert got.expiration_policy.ttl == dt.timedelta(days=2)
    assert got.dead_letter_policy.dead_letter_topic == dead
    assert got.dead_letter_policy.max_delivery_attempts == 7
    assert got.retry_policy.minimum_backoff == dt.timedelta(seconds=1)
    assert got.retry_policy.maximum_backoff == dt.timedelta(seconds=600)
    assert dict(got.labels) == {}

    for paths, error in [
        (["filter"], gexc.InvalidArgument),
        (["no_such_field"], gexc.InvalidArgument),
        ([], gexc.InvalidArgument),
    ]:
        with pytest.raises(error):
            env.subscriber.update_subscription(
                subscription={"name": sub, "filter": "attributes:a"},
                update_mask=field_mask_pb2.FieldMask(paths=paths),
            )
    with pytest.raises(gexc.InvalidArgument, match="ack deadline"):
        env.subscriber.update_subscription(
            subscription={"name": sub, "ack_deadline_seconds": 700},
            update_mask=field_mask_pb2.FieldMask(paths=["ack_deadline_seconds"]),
        )
    with pytest.raises(gexc.NotFound):
        env.subscriber.update_subscription(
            subscription={"name": f"{PROJECT}/subscriptions/missing", "ack_deadline_seconds": 20},
            update_mask=field_mask_pb2.FieldMask(paths=["ack_deadline_seconds"]),
        )
    # the new ack deadline is used for the next lease, then the 1 s minimum backoff applies
    env.publish(topic)
    [first] = env.pull(sub)
    env.advance(41.5)
    assert env.pull(sub) == []
    env.advance(1.0)
    assert env.pull(sub) == []
    env.advance(0.6)
    [again] = env.pull(sub)
    assert again.delivery_attempt == 2 and first.delivery_attempt == 1


# --- publish and pull ------------------------------------------------------------------------


def test_batched_publish_and_pull_each_subscription_gets_a_copy(env: Env) -> None:
    topic = env.topic()
    env.publish(topic, b"before any subscription")
    first, second = env.subscription(topic), env.subscription(topic)
    publisher = pubsub_v1.PublisherClient(
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=25, max_latency=0.05)
    )
    try:
        futures = [publisher.publish(topic, b"msg-%d" % i, n=str(i)) for i in range(200)]
        ids = [f.result(timeout=WAIT) for f in futures]
    finally:
        publisher.stop()
        publisher.transport.close()
    assert len(set(ids)) == 200 and all(i.isdigit() for i in ids)

    for sub in (first, second):
        received = []
        while batch := env.pull(sub, max_messages=64):
            assert len(batch) <= 64
            received += batch
            env.ack(sub, batch)
        assert sorted(r.message.message_id for r in received) == sorted(ids)
        assert {r.message.data for r in received} == {b"msg-%d" % i for i in range(200)}
        assert all(r.message.attributes["n"] == r.message.data[4:].decode() for r in received)
        assert all(r.delivery_attempt == 0 for r in received)  # no dead-letter policy
        assert received[0].message.publish_time.timestamp() == pytest.approx(env.clock.now)
    env.advance(60)
    assert env.pull(first) == [] and env.pull(second) == []


def test_publish_validation(env: Env) -> None:
    topic = env.topic()
    with pytest.raises(gexc.InvalidArgument, match="data or attributes"):
        env.publisher.publish(topic, b"").result(timeout=WAIT)
    with pytest.raises(gexc.InvalidArgument, match="at most 100 attributes"):
        many = {f"k{i}": "v" for i in range(101)}
        env.publisher.publish(topic, b"x", **many).result(timeout=WAIT)
    with pytest.raises(gexc.InvalidArgument, match="1024 bytes"):
        env.publisher.publish(topic, b"x", big="v" * 1025).result(timeout=WAIT)
    assert env.publish(topic, b"", only="attributes").isdigit()
    with pytest.raises(gexc.InvalidArgument, match="max_messages"):
        env.pull(env.subscription(topic), max_messages=0)


def test_ack_ids(env: Env) -> None:
    topic = env.topic()
    sub = env.subscription(topic)
    env.publish(topic)
    [received] = env.pull(sub)
    with pytest.raises(gexc.InvalidArgument, match="Invalid ack ID"):
        env.subscriber.acknowledge(subscription=sub, ack_ids=["garbage"])
    env.subscriber.acknowledge(subscription=sub, ack_ids=["ffff-1-1"])  # unknown: ignored
    env.subscriber.modify_ack_deadline(
        subscription=sub, ack_ids=["ffff-1-1"], ack_deadline_seconds=0
    )
    with pytest.raises(gexc.InvalidArgument, match="ack deadline"):
        env.modack(sub, [received], 601)
    env.ack(sub, [received])
    env.ack(sub, [received])  # acking twice is fine
    env.advance(600)
    assert env.pull(sub) == []


# --- filters ---------------------------------------------------------------------------------


def test_subscription_filters(env: Env) -> None:
    topic = env.topic()
    filters = {
        "eq": 'attributes.kind = "gpu"',
        "ne": 'attributes.kind != "gpu"',
        "has": "attributes:urgent",
        "prefix": 'hasPrefix(attributes.region, "eu-")',
        "and": 'attributes.kind = "gpu" AND attributes:urgent',
        "or": 'attributes.kind = "cpu" OR hasPrefix(attributes.region, "us")',
        "not": "NOT attributes:urgent",
        "minus": '-attributes.kind = "gpu"',
        "nested": 'attributes:urgent AND (attributes.kind = "cpu" OR attributes."my-key" = "y")',
    }
    subs = {label: env.subscription(topic, filter=text) for label, text in filters.items()}
    everything = env.subscription(topic)
    messages = {
        b"1": {"kind": "gpu", "region": "eu-west1"},
        b"2": {"kind": "gpu", "urgent": "1", "region": "us-east1"},
        b"3": {"kind": "cpu", "urgent": "", "region": "eu-north1"},
        b"4": {"region": "asia"},
        b"5": {"my-key": "y", "urgent": "1"},
    }
    for data, attributes in messages.items():
        env.publish(topic, data, **attributes)
    expected = {
        "eq": {b"1", b"2"},
        "ne": {b"3", b"4", b"5"},
        "has": {b"2", b"3", b"5"},
        "prefix": {b"1", b"3"},
        "and": {b"2"},
        "or": {b"2", b"3"},
        "not": {b"1", b"4"},
        "minus": {b"3", b"4", b"5"},
        "nested": {b"3", b"5"},
    }
    for label, sub in subs.items():
        received = env.pull(sub)
        assert set(_data(received)) == expected[label], label
        assert len(received) == len(expected[label])
        env.ack(sub, received)
    assert set(_data(env.pull(everything))) == set(messages)
    # filtered-out messages are treated as acknowledged: they never show up later
    env.advance(3600)
    for sub in subs.values():
        assert env.pull(sub) == []
    assert env.subscriber.get_subscription(subscription=subs["nested"]).filter == filters["nested"]


# --- redelivery, nack, dead letters ----------------------------------------------------------


def test_redelivery_after_ack_deadline(env: Env) -> None:
    topic = env.topic()
    sub = env.subscription(topic)
    env.publish(topic, b"job")
    [first] = env.pull(sub)
    env.advance(9.5)
    assert env.pull(sub) == []
    env.advance(1)
    [second] = env.pull(sub)
    assert second.message.message_id == first.message.message_id
    assert second.ack_id != first.ack_id
    # a ModifyAckDeadline extends the lease, a short one makes it expire sooner
    env.modack(sub, [second], 60)
    env.advance(59)
    assert env.pull(sub) == []
    env.modack(sub, [second], 1)
    env.advance(1)
    [third] = env.pull(sub)
    env.modack(sub, [second], 0)  # a stale ack id does not nack the current lease
    assert env.pull(sub) == []
    env.ack(sub, [third])
    env.advance(120)
    assert env.pull(sub) == []


def test_an_ack_after_the_deadline_does_not_stop_the_redelivery(env: Env) -> None:
    # Pub/Sub: "Acknowledging a message whose ack deadline has expired may succeed, but such a message may
    # be redelivered later." The stand-in takes the unkind side: a late ack is ignored.
    topic = env.topic()
    sub = env.subscription(topic)
    env.publish(topic, b"job")
    [first] = env.pull(sub)
    env.advance(11)  # the 10 s deadline lapsed; nobody pulled since
    env.ack(sub, [first])
    [second] = env.pull(sub)
    assert second.message.data == b"job"
    env.ack(sub, [first])  # an earlier delivery's ack id does not end the current lease either
    env.modack(sub, [second], 0)
    [third] = env.pull(sub)
    assert third.message.message_id == first.message.message_id
    env.modack(sub, [third], 0)
    env.ack(sub, [third])  # nor does an ack after a nack
    [fourth] = env.pull(sub)
    env.ack(sub, [fourth])
    env.advance(120)
    assert env.pull(sub) == []


def test_redelivery_with_real_clock_and_short_deadline(monkeypatch) -> None:
    with PubSubStandIn() as standin:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", standin.address)
        publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        try:
            topic = publisher.create_topic(name=f"{PROJECT}/topics/real").name
            sub = subscriber.create_subscription(
                name=f"{PROJECT}/subscriptions/real", topic=topic
            ).name
            publisher.publish(topic, b"x").result(timeout=WAIT)
            [first] = subscriber.pull(subscription=sub, max_messages=5).received_messages
            subscriber.modify_ack_deadline(
                subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=1
            )
            assert subscriber.pull(subscription=sub, max_messages=5).received_messages == []
            redelivered = []

            def pulled() -> bool:
                response = subscriber.pull(subscription=sub, max_messages=5)
                redelivered.extend(response.received_messages)
                return bool(redelivered)

            assert _wait_for(pulled, timeout=5)
            assert redelivered[0].message.data == b"x"
        finally:
            publisher.stop()
            publisher.transport.close()
            subscriber.close()


def test_nack_redelivers_immediately(env: Env) -> None:
    topic = env.topic()
    sub = env.subscription(topic)
    env.publish(topic, b"retry me")
    [first] = env.pull(sub)
    env.modack(sub, [first], 0)
    [again] = env.pull(sub)
    assert again.message.data == b"retry me"
    env.ack(sub, [again])
    assert env.pull(sub) == []


def test_retry_policy_backoff_delays_redelivery(env: Env) -> None:
    topic = env.topic()
    sub = env.subscription(
        topic,
        retry_policy={
            "minimum_backoff": dt.timedelta(seconds=5),
            "maximum_backoff": dt.timedelta(seconds=8),
        },
    )
    env.publish(topic)
    for backoff in (5, 8):  # 5, then min(5 * 2, 8)
        env.modack(sub, env.pull(sub), 0)
        env.advance(backoff - 0.5)
        assert env.pull(sub) == []
        env.advance(0.5)
    assert len(env.pull(sub)) == 1


def test_dead_lettering_after_max_delivery_attempts(env: Env) -> None:
    topic, dead_topic = env.topic(), env.topic()
    dead_sub = env.subscription(dead_topic)
    sub = env.subscription(
        topic, dead_letter_policy={"dead_letter_topic": dead_topic, "max_delivery_attempts": 5}
    )
    env.publish(topic, b"poison", origin="test", kind="bad")
    env.publish(topic, b"fine")
    attempts = []
    for i in range(5):
        received = env.pull(sub)
        poison = [r for r in received if r.message.data == b"poison"]
        env.ack(sub, [r for r in received if r.message.data == b"fine"])
        attempts.append(poison[0].delivery_attempt)
        if i % 2:
            env.modack(sub, poison, 0)  # nack
        else:
            env.advance(11)  # let the deadline expire
    assert attempts == [1, 2, 3, 4, 5]
    assert env.pull(sub) == []
    [dead] = env.pull(dead_sub)
    assert dead.message.data == b"poison"
    attributes = dict(dead.message.attributes)
    assert attributes["origin"] == "test" and attributes["kind"] == "bad"
    assert attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"
    assert attributes["CloudPubSubDeadLetterSourceSubscription"] == sub.rsplit("/", 1)[1]
    env.advance(600)
    assert env.pull(sub) == []


# --- streaming pull --------------------------------------------------------------------------


def test_subscribe_honours_flow_control(env: Env) -> None:
    topic = env.topic()
    sub = env.subscription(topic)
    for i in range(12):
        env.publish(topic, b"%d" % i)
    lock = threading.Lock()
    state = {"in_flight": 0, "peak": 0}
    seen: list[bytes] = []
    nacked: set[bytes] = set()

    def callback(message) -> None:
        with lock:
            state["in_flight"] += 1
            state["peak"] = max(state["peak"], state["in_flight"])
        time.sleep(0.01)
        with lock:
            state["in_flight"] -= 1
            seen.append(message.data)
            first_time = message.data == b"3" and message.data not in nacked
            if first_time:
                nacked.add(message.data)
        message.nack() if first_time else message.ack()

    future = env.subscriber.subscribe(
        sub, callback, flow_control=pubsub_v1.types.FlowControl(max_messages=1)
    )
    try:
        assert _wait_for(lambda: len(seen) >= 13)
    finally:
        future.cancel()
        future.result(timeout=WAIT)
    assert state["peak"] == 1
    assert sorted(seen) == sorted([b"%d" % i for i in range(12)] + [b"3"])
    assert env.pull(sub) == []


class RawStream:
    """A StreamingPull through the client's generated API, with requests we control."""

    def __init__(self, env: Env, sub: str, **first) -> None:
        self.requests: queue.Queue = queue.Queue()
        self.responses: queue.Queue = queue.Queue()
        self.requests.put(
            T.StreamingPullRequest(subscription=sub, stream_ack_deadline_seconds=60, **first)
        )
        self._stream = env.subscriber.streaming_pull(requests=self._generate())
        threading.Thread(target=self._read, daemon=True).start()

    def _generate(self):
        while (request := self.requests.get()) is not None:
            yield request

    def _read(self) -> None:
        try:
            for response in self._stream:
                self.responses.put(response)
        except Exception as exc:  # the stream's final status
            self.responses.put(exc)

    def next(self, timeout: float = WAIT):
        item = self.responses.get(timeout=timeout)
        if isinstance(item, Exception):
            raise item
        return list(item.received_messages)

    def nothing_within(self, seconds: float) -> bool:
        try:
            self.responses.get(timeout=seconds)
        except queue.Empty:
            return True
        return False

    def close(self) -> None:
        self.requests.put(None)
        self._stream.cancel()


def test_streaming_pull_server_side_flow_control_and_stream_acks(env: Env) -> None:
    topic = env.topic()
    sub = env.subscription(topic)
    for i in range(3):
        env.publish(topic, b"%d" % i)
    stream = RawStream(env, sub, max_outstanding_messages=1)
    try:
        [first] = stream.next()
        assert first.message.data == b"0"
        assert stream.nothing_within(0.3)  # one outstanding: the server holds the rest back
        env.ack(sub, [first])  # a unary Acknowledge frees the slot
        [second] = stream.next()
        assert second.message.data == b"1"
        nack = T.StreamingPullRequest(
            modify_deadline_ack_ids=[second.ack_id], modify_deadline_seconds=[0]
        )
        stream.requests.put(nack)
        [again] = stream.next()  # nacked on the stream: redelivered at once
        assert again.message.data == b"1"
        stream.requests.put(T.StreamingPullRequest(ack_ids=[again.ack_id]))  # acked on the stream
        [third] = stream.next()
        assert third.message.data == b"2"
        env.advance(61)  # stream_ack_deadline_seconds passed: redelivered on the stream
        [expired] = stream.next()
        assert expired.message.data == b"2"
        stream.requests.put(T.StreamingPullRequest(ack_ids=[expired.ack_id]))
        env.publish(topic, b"late")  # a waiting stream wakes when a message arrives
        [late] = stream.next()
        assert late.message.data == b"late"
    finally:
        stream.close()


def test_streaming_pull_byte_limit_and_errors(env: Env) -> None:
    topic = env.topic()
    sub = env.subscription(topic)
    for i in range(4):
        env.publish(topic, b"x" * 1000)
    stream = RawStream(env, sub, max_outstanding_bytes=1500)
    try:
        first = stream.next()
        assert len(first) == 2  # sending stops once 1500 bytes or more are outstanding
        assert stream.nothing_within(0.3)
        env.ack(sub, first)
        assert len(stream.next()) == 2
    finally:
        stream.close()
    bad = RawStream(env, sub)
    bad.requests.put(
        T.StreamingPullRequest(modify_deadline_ack_ids=["a-1-1"], modify_deadline_seconds=[])
    )
    with pytest.raises(gexc.InvalidArgument):
        bad.next()
    bad.close()
    missing = RawStream(env, f"{PROJECT}/subscriptions/missing")
    with pytest.raises(gexc.NotFound):
        missing.next()
    missing.close()


def test_message_ordering(env: Env) -> None:
    topic = env.topic()
    sub = env.subscription(topic, enable_message_ordering=True)
    publisher = pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
    )
    try:
        futures = [publisher.publish(topic, b"a%d" % i, ordering_key="a") for i in range(4)]
        futures += [publisher.publish(topic, b"b%d" % i, ordering_key="b") for i in range(2)]
        futures += [publisher.publish(topic, b"none")]
        [f.result(timeout=WAIT) for f in futures]
    finally:
        publisher.stop()
        publisher.transport.close()
    assert set(_data(env.pull(sub))) == {b"a0", b"b0", b"none"}  # one outstanding per key
    env.advance(11)
    batch = env.pull(sub)
    assert set(_data(batch)) == {b"a0", b"b0", b"none"}  # redelivered before later messages
    env.ack(sub, [r for r in batch if r.message.data != b"a0"])
    env.modack(sub, [r for r in batch if r.message.data == b"a0"], 0)
    order = {"a": [], "b": [b"b0"]}
    while batch := env.pull(sub):
        for r in batch:
            order[r.message.ordering_key].append(r.message.data)
        env.ack(sub, batch)
    assert order == {"a": [b"a0", b"a1", b"a2", b"a3"], "b": [b"b0", b"b1"]}


# --- retention and expiration ----------------------------------------------------------------


def test_message_retention_drops_old_messages(env: Env) -> None:
    topic = env.topic()
    sub = env.subscription(topic, message_retention_duration=dt.timedelta(minutes=10))
    env.publish(topic, b"old")
    env.advance(300)
    env.publish(topic, b"new")
    [leased] = [r for r in env.pull(sub) if r.message.data == b"old"]
    env.advance(301)  # "old" is now past retention even though it is leased
    env.advance(30)
    assert _data(env.pull(sub)) == [b"new"]
    env.ack(sub, [leased])  # acking a dropped message is harmless


def test_default_retention_is_seven_days(env: Env) -> None:
    topic = env.topic()
    sub = env.subscription(topic)
    env.publish(topic)
    env.advance(7 * 86400 - 60)
    [received] = env.pull(sub)
    env.modack(sub, [received], 0)
    env.advance(61)
    assert env.pull(sub) == []


def test_subscription_expiration(env: Env) -> None:
    topic = env.topic()
    short = env.subscription(topic, expiration_policy={"ttl": dt.timedelta(days=1)})
    default = env.subscription(topic)
    never = env.subscription(topic, expiration_policy={})
    never_policy = env.subscriber.get_subscription(subscription=never).expiration_policy
    assert never_policy.ttl == dt.timedelta(0)
    with pytest.raises(gexc.InvalidArgument, match="ttl"):
        env.subscription(topic, expiration_policy={"ttl": dt.timedelta(hours=1)})

    env.advance(0.75 * 86400)
    env.pull(short)  # activity resets the clock
    env.advance(0.75 * 86400)
    assert env.subscriber.get_subscription(subscription=short).name == short
    env.advance(0.3 * 86400)
    with pytest.raises(gexc.NotFound):
        env.subscriber.get_subscription(subscription=short)
    assert short not in env.publisher.list_topic_subscriptions(topic=topic)

    env.advance(30 * 86400)
    with pytest.raises(gexc.NotFound):
        env.subscriber.get_subscription(subscription=default)
    env.advance(400 * 86400)
    assert env.subscriber.get_subscription(subscription=never).name == never


# --- unimplemented ---------------------------------------------------------------------------


def test_unimplemented_features_answer_unimplemented(env: Env) -> None:
    topic = env.topic()
    sub = env.subscription(topic)
    with pytest.raises(gexc.MethodNotImplemented, match="Seek"):
        env.subscriber.seek(
            request={"subscription": sub, "time": dt.datetime.now(tz=dt.timezone.utc)}
        )
    with pytest.raises(gexc.MethodNotImplemented, match="CreateSnapshot"):
        env.subscriber.create_snapshot(
            request={"name": f"{PROJECT}/snapshots/snap", "subscription": sub}
        )
    with pytest.raises(gexc.MethodNotImplemented, match="Push delivery"):
        env.subscription(topic, push_config={"push_endpoint": "http://127.0.0.1:9/push"})
    with pytest.raises(gexc.MethodNotImplemented, match="Exactly-once"):
        env.subscription(topic, enable_exactly_once_delivery=True)
    with pytest.raises(gexc.MethodNotImplemented, match="BigQuery"):
        env.subscription(topic, bigquery_config={"table": "p.d.t"})
    with pytest.raises(gexc.MethodNotImplemented):
        env.publisher.create_topic(
            request={
                "name": f"{PROJECT}/topics/schema",
                "schema_settings": {"schema": "projects/p/schemas/s"},
            }
        )
    with pytest.raises(gexc.MethodNotImplemented, match="Push delivery"):
        env.subscriber.modify_push_config(
            subscription=sub, push_config={"push_endpoint": "http://127.0.0.1:9/push"}
        )
    env.subscriber.modify_push_config(subscription=sub, push_config={})  # pull: accepted
    assert not env.publisher.get_iam_policy(request={"resource": topic}).bindings  # IAM: kept, not enforced


def test_iam_policies_are_kept_per_resource_and_go_with_it(env) -> None:
    topic = env.topic()
    sub = env.subscription(topic)
    member = "serviceAccount:a@p.iam.gserviceaccount.com"
    policy = env.subscriber.get_iam_policy(request={"resource": sub})
    policy.bindings.add(role="roles/pubsub.subscriber", members=[member])
    env.subscriber.set_iam_policy(request={"resource": sub, "policy": policy})

    read = env.subscriber.get_iam_policy(request={"resource": sub})
    assert [(b.role, list(b.members)) for b in read.bindings] == [("roles/pubsub.subscriber", [member])]
    with pytest.raises(gexc.Aborted):  # written meanwhile: the stale etag is refused
        env.subscriber.set_iam_policy(request={"resource": sub, "policy": policy})
    env.subscriber.delete_subscription(subscription=sub)
    with pytest.raises(gexc.NotFound):
        env.subscriber.get_iam_policy(request={"resource": sub})
    env.subscriber.create_subscription(request={"name": sub, "topic": topic})
    assert not env.subscriber.get_iam_policy(request={"resource": sub}).bindings


# --- lifecycle -------------------------------------------------------------------------------


def test_main_serves_until_sigterm(monkeypatch, tmp_path) -> None:
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "zen_dev.local.pubsub", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        ready, _, _ = select.select([process.stdout], [], [], WAIT)
        assert ready, f"the stand-in printed nothing: {stderr_path.read_text()}"
        line = process.stdout.readline().strip()
        prefix = "pubsub stand-in listening on 127.0.0.1:"
        assert line.startswith(prefix), (line, stderr_path.read_text())
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", line.rsplit(" ", 1)[1])
        publisher = pubsub_v1.PublisherClient()
        assert publisher.create_topic(name=f"{PROJECT}/topics/cli").name.endswith("/cli")
        publisher.transport.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=WAIT) == 0, stderr_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=WAIT)
