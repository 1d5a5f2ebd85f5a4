"""Publishing in tests goes through the official client to the local Pub/Sub stand-in.

``StandInPublisher`` is the Publisher port the tests hand to Zen: the production ``PubSubPublisher``
(plus ``fail_next``, which makes the next N publishes fail as if the process died between commit and
publish). ``on(topic)`` reads back, through a subscription per Zen topic, what actually reached
Pub/Sub.
"""

from __future__ import annotations

from typing import Sequence

from google.cloud import pubsub_v1

from zen.adapters.pubsub import PubSubPublisher
from zen.core.config import ZenConfig
from zen.jobs.outgoing import OutgoingMessage
from zen_dev.local.bridge import ensure_topic


class StandInPublisher:
    def __init__(self, config: ZenConfig, publisher_client: pubsub_v1.PublisherClient,
                 subscriber_client: pubsub_v1.SubscriberClient):
        self._project = config.project
        self._real = PubSubPublisher(config.project, client=publisher_client, timeout_s=10)
        self._subscriber = subscriber_client
        self._received: dict[str, list[OutgoingMessage]] = {}
        self.fail_next = 0
        for topic in config.topics.model_dump().values():
            path = ensure_topic(publisher_client, self._project, topic)
            subscription = subscriber_client.subscription_path(self._project, f"record-{topic}")
            subscriber_client.create_subscription(name=subscription, topic=path)
            self._received[topic] = []

    def publish(self, messages: Sequence[OutgoingMessage]) -> list[str | Exception]:
        failed = min(self.fail_next, len(messages))
        self.fail_next -= failed
        results: list[str | Exception] = [ConnectionError("injected publish failure")] * failed
        return results + self._real.publish(messages[failed:])

    def publish_soon(self, messages: Sequence[OutgoingMessage], done, *, linger_s: float = 0.0) -> None:
        done(self.publish(messages))  # at once: tests read what was published right after a call

    def on(self, topic: str) -> list[OutgoingMessage]:
        """Every message that reached ``topic`` so far, in publish order."""
        subscription = self._subscriber.subscription_path(self._project, f"record-{topic}")
        while True:
            response = self._subscriber.pull(subscription=subscription, max_messages=1000, timeout=10)
            if not response.received_messages:
                break
            self._subscriber.acknowledge(subscription=subscription,
                                         ack_ids=[m.ack_id for m in response.received_messages])
            # The stand-in numbers messages in publish order.
            ordered = sorted(response.received_messages, key=lambda m: int(m.message.message_id))
            self._received[topic] += [OutgoingMessage(topic, m.message.data, dict(m.message.attributes))
                                      for m in ordered]
        return list(self._received[topic])
