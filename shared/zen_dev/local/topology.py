"""Create the Pub/Sub topics and the agents' subscriptions that terraform creates in production.

Used by the local stack and the tests, through the official client (so against the stand-in when
``PUBSUB_EMULATOR_HOST`` is set). Idempotent. The functions' own trigger subscriptions are the
event bridge's business (``zen_dev.local.bridge``).
"""

from __future__ import annotations

from datetime import timedelta

from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1
from google.pubsub_v1 import types as T

from zen.core.config import ZenConfig
from zen.core.lease import start_retention_s
from zen_dev.local.bridge import ensure_topic

START_ACK_DEADLINE_S = 60  # an agent extends its lease while it waits for its claim's answer


def ensure_topology(config: ZenConfig, publisher: pubsub_v1.PublisherClient | None = None,
                    subscriber: pubsub_v1.SubscriberClient | None = None) -> None:
    publisher = publisher or pubsub_v1.PublisherClient()
    subscriber = subscriber or pubsub_v1.SubscriberClient()
    for topic in config.topics.model_dump().values():
        ensure_topic(publisher, config.project, topic)
    start_topic = publisher.topic_path(config.project, config.topics.job_start)
    for cluster in config.clusters:
        for region in cluster.regions:
            subscription = T.Subscription(
                name=subscriber.subscription_path(config.project, config.job_start_subscription(cluster.name, region)),
                topic=start_topic,
                filter=config.job_start_filter(cluster.name, region),
                ack_deadline_seconds=START_ACK_DEADLINE_S,
                # as terraform's: a copy outlives one republish period, and no stale copies pile up past two
                message_retention_duration=timedelta(seconds=start_retention_s(config.deadlines.start_republish_s)),
                # terraform's minimum backoff is 10 s: 1 s here keeps a given-back start's redelivery quick in tests
                retry_policy=T.RetryPolicy(minimum_backoff=timedelta(seconds=1),
                                           maximum_backoff=timedelta(seconds=60)),
            )
            try:
                subscriber.create_subscription(request=subscription)
            except gexc.AlreadyExists:
                pass
