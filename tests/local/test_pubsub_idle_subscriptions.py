"""The Pub/Sub stand-in's time-based rules (retention, lease deadlines, expiry) look only at the subscriptions
that hold messages, and at every subscription only when one may expire: one stand-in serves a whole test run,
whose tests leave thousands of idle subscriptions behind, and each operation walked them all (a test's topics and
subscriptions took 11 ms to make at a run's start, 20 ms after 300 tests)."""

from __future__ import annotations

import datetime as dt

from google.pubsub_v1 import types as T

from zen_dev.local.pubsub.backlog import SubscriptionQueue
from zen_dev.local.pubsub.state import PubSubState

IDLE = 2000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_an_operation_visits_only_the_subscriptions_holding_messages(monkeypatch) -> None:
    state = PubSubState(Clock())
    for project in [f"proj-{i}" for i in range(IDLE)] + ["busy-proj"]:
        state.create_topic(T.Topic(name=f"projects/{project}/topics/topic"))
        state.create_subscription(T.Subscription(name=f"projects/{project}/subscriptions/sub",
                                                 topic=f"projects/{project}/topics/topic"))
    visits = []
    drop_old = SubscriptionQueue.drop_old
    monkeypatch.setattr(SubscriptionQueue, "drop_old",
                        lambda queue, now: visits.append(queue) or drop_old(queue, now))

    state.publish("projects/busy-proj/topics/topic", [T.PubsubMessage(data=b"x")])
    [received] = state.delivery.pull("projects/busy-proj/subscriptions/sub", 10)
    assert received.message.data == b"x"
    assert len(visits) <= 2, f"{len(visits)} subscriptions visited by two operations"


def test_an_idle_subscription_still_expires() -> None:
    clock = Clock()
    state = PubSubState(clock)
    state.create_topic(T.Topic(name="projects/proj/topics/topic"))
    day = T.ExpirationPolicy(ttl=dt.timedelta(days=1))
    for name in ("idle", "pulled"):
        state.create_subscription(T.Subscription(name=f"projects/proj/subscriptions/{name}",
                                                 topic="projects/proj/topics/topic", expiration_policy=day))
    clock.now += 0.75 * 86400
    state.delivery.pull("projects/proj/subscriptions/pulled", 1)  # activity: a day from now
    clock.now += 0.3 * 86400
    state.wake()
    names = [s.name for s in state.list_subscriptions("projects/proj", 0, "")[0]]
    assert names == ["projects/proj/subscriptions/pulled"]
    clock.now += 0.75 * 86400
    assert state.list_subscriptions("projects/proj", 0, "")[0] == []
