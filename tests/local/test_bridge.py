"""The event bridge delivers Pub/Sub messages to functions-framework servers as Eventarc does:
CloudEvents over HTTP, retried with backoff on failure, dead-lettered after N attempts."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from google.cloud import pubsub_v1

from tests.waiting import wait_for
from zen_dev.local.bridge import DeliveryPolicy, EventBridge, Route, Ticker, ensure_topic
from zen_dev.local.functions_server import FunctionServer
from zen_dev.local.pubsub import PubSubStandIn

PROJECT = "zen-local"
FLAKY = Path(__file__).parent / "fixtures" / "flaky_main.py"
FAST = DeliveryPolicy(max_delivery_attempts=5, minimum_backoff_s=0.1, maximum_backoff_s=0.4, ack_deadline_s=10)


@pytest.fixture
def pubsub(monkeypatch):
    with PubSubStandIn() as server:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", server.address)
        yield server


def pull_all(subscriber, subscription, want, timeout_s=20.0):
    got = []

    def more():
        response = subscriber.pull(subscription=subscription, max_messages=100, timeout=5)
        if response.received_messages:
            subscriber.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in response.received_messages])
            got.extend(response.received_messages)
        return len(got) >= want

    wait_for(more, timeout_s)
    return got


def flaky_server(tmp_path, fails):
    log = tmp_path / "deliveries.jsonl"
    log.touch()
    return FunctionServer("flaky", source=FLAKY, env={"FLAKY_LOG": str(log), "FLAKY_FAILS": str(fails)}), log


def deliveries(log):
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.parametrize("binary", [False, True], ids=["structured", "binary"])
def test_delivers_cloud_events_and_retries_a_failing_function(pubsub, tmp_path, binary):
    server, log = flaky_server(tmp_path, fails=2)
    policy = DeliveryPolicy(**{**FAST.__dict__, "binary_mode": binary})
    with server, EventBridge(PROJECT, [Route("jobs-in", server.url)], policy):
        publisher = pubsub_v1.PublisherClient()
        publisher.publish(publisher.topic_path(PROJECT, "jobs-in"), b'{"hello": 1}', origin="test").result(10)
        wait_for(lambda: len(deliveries(log)) >= 3)
        time.sleep(0.5)  # an acked message must not come back
    seen = deliveries(log)
    assert len(seen) == 3 and len({d["id"] for d in seen}) == 1
    event = seen[-1]
    assert event["type"] == "google.cloud.pubsub.topic.v1.messagePublished"
    assert base64.b64decode(event["data"]["message"]["data"]) == b'{"hello": 1}'
    assert event["data"]["message"]["attributes"] == {"origin": "test"}
    assert event["data"]["subscription"] == f"projects/{PROJECT}/subscriptions/eventarc-jobs-in"
    assert [d["data"]["deliveryAttempt"] for d in seen] == [1, 2, 3]


def test_dead_letters_after_n_attempts(pubsub, tmp_path):
    server, log = flaky_server(tmp_path, fails=1000)
    subscriber = pubsub_v1.SubscriberClient()
    publisher = pubsub_v1.PublisherClient()
    dead = ensure_topic(publisher, PROJECT, "jobs-in-dead-letter")
    watch = subscriber.subscription_path(PROJECT, "watch-dead")
    subscriber.create_subscription(name=watch, topic=dead)
    with server, EventBridge(PROJECT, [Route("jobs-in", server.url)], FAST):
        publisher.publish(publisher.topic_path(PROJECT, "jobs-in"), b'{"poison": true}').result(10)
        [dead_letter] = pull_all(subscriber, watch, want=1)
        time.sleep(0.5)
    assert dead_letter.message.data == b'{"poison": true}'
    assert len(deliveries(log)) == 5


def test_ticker_publishes_scale_ticks(pubsub):
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = ensure_topic(publisher, PROJECT, "zen-scale-tick")
    watch = subscriber.subscription_path(PROJECT, "watch-ticks")
    subscriber.create_subscription(name=watch, topic=topic)
    ticker = Ticker(PROJECT, "zen-scale-tick", every_s=0.1).start()
    try:
        ticks = pull_all(subscriber, watch, want=3)
    finally:
        ticker.stop()
    assert all("scheduled_at" in json.loads(t.message.data) for t in ticks)
