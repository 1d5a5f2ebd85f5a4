"""The local event bridge: delivers Pub/Sub messages to functions as Eventarc does for gen2 functions
(one subscription per route, CloudEvents over HTTP, 2xx acks), and ticks ``zen-scale-tick`` as Cloud
Scheduler does, through the official client only.

The policies and modes: docs/how-to/local.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Sequence

from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1
from google.pubsub_v1 import types as T

from zen.core import eventarc
from zen.logs import setup_logging
from zen_dev.local.until_stopped import stop_signals_heard

log = logging.getLogger("zen.bridge")


@dataclass(frozen=True)
class Route:
    topic: str  # short topic name, e.g. zen-job-submitted
    url: str  # where the function listens, e.g. http://127.0.0.1:8081/
    filter: str = ""  # the subscription's Pub/Sub filter (the notifier's: zen.core.notify.NOTICE_FILTER)

    @property
    def subscription(self) -> str:
        return f"eventarc-{self.topic}"

    @property
    def dead_letter_topic(self) -> str:
        return f"{self.topic}-dead-letter"


@dataclass(frozen=True)
class DeliveryPolicy:
    max_delivery_attempts: int = 5  # Pub/Sub allows 5..100
    minimum_backoff_s: float = 1.0  # Eventarc's defaults are 10 s .. 600 s; shorter locally
    maximum_backoff_s: float = 60.0
    ack_deadline_s: int = 60  # how long a push waits for the function's answer (as terraform sets it: its timeout)
    binary_mode: bool = False  # structured mode (application/cloudevents+json) by default
    request_timeout_s: float = 60.0


def ensure_topic(publisher: pubsub_v1.PublisherClient, project: str, topic: str) -> str:
    path = publisher.topic_path(project, topic)
    try:
        publisher.create_topic(name=path)
    except gexc.AlreadyExists:
        pass
    return path


class EventBridge:
    def __init__(self, project: str, routes: Sequence[Route], policy: DeliveryPolicy = DeliveryPolicy(),
                 publisher: pubsub_v1.PublisherClient | None = None,
                 subscriber: pubsub_v1.SubscriberClient | None = None):
        self.project = project
        self.routes = list(routes)
        self.policy = policy
        self._publisher = publisher or pubsub_v1.PublisherClient()
        self._subscriber = subscriber or pubsub_v1.SubscriberClient()
        self._futures = []

    def ensure_subscriptions(self) -> None:
        """Create each route's topic, dead-letter topic and trigger subscription (idempotent)."""
        for route in self.routes:
            topic = ensure_topic(self._publisher, self.project, route.topic)
            dead_letter = ensure_topic(self._publisher, self.project, route.dead_letter_topic)
            subscription = T.Subscription(
                name=self._subscriber.subscription_path(self.project, route.subscription),
                topic=topic,
                filter=route.filter,
                ack_deadline_seconds=self.policy.ack_deadline_s,
                retry_policy=T.RetryPolicy(
                    minimum_backoff=timedelta(seconds=self.policy.minimum_backoff_s),
                    maximum_backoff=timedelta(seconds=self.policy.maximum_backoff_s),
                ),
                dead_letter_policy=T.DeadLetterPolicy(
                    dead_letter_topic=dead_letter, max_delivery_attempts=self.policy.max_delivery_attempts
                ),
            )
            try:
                self._subscriber.create_subscription(request=subscription)
            except gexc.AlreadyExists:
                pass

    def start(self) -> "EventBridge":
        self.ensure_subscriptions()
        for route in self.routes:
            path = self._subscriber.subscription_path(self.project, route.subscription)
            future = self._subscriber.subscribe(
                path, callback=self._deliverer(route),
                flow_control=pubsub_v1.types.FlowControl(max_messages=8),
            )
            self._futures.append(future)
        log.info("event bridge started", extra={"routes": [f"{r.topic} -> {r.url}" for r in self.routes]})
        return self

    def stop(self) -> None:
        for future in self._futures:
            future.cancel()
        for future in self._futures:
            try:
                future.result(timeout=10)
            except Exception:  # noqa: BLE001 - cancelled futures raise on result(); that is the point
                pass
        self._futures = []

    def __enter__(self) -> "EventBridge":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _deliverer(self, route: Route):
        def deliver(message) -> None:
            event = eventarc.pubsub_cloud_event(
                message.data, message_id=message.message_id, topic=route.topic, project=self.project,
                attributes=dict(message.attributes), publish_time=message.publish_time,
                subscription=self._subscriber.subscription_path(self.project, route.subscription),
            )
            if message.delivery_attempt:
                event["data"]["deliveryAttempt"] = message.delivery_attempt
            ok, detail = self.post(route.url, event)
            if ok:
                message.ack()
            else:
                log.warning("function refused a message; it will be redelivered with backoff", extra={
                    "topic": route.topic, "message_id": message.message_id, "detail": detail,
                    "delivery_attempt": message.delivery_attempt})
                message.nack()

        return deliver

    def post(self, url: str, event: dict) -> tuple[bool, str]:
        body, headers = (eventarc.binary_request if self.policy.binary_mode else eventarc.structured_request)(event)
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        # A push waits for the answer only as long as the subscription's ack deadline; past it the message
        # is nacked and comes back, though the function may still be serving it (a second delivery).
        timeout = min(self.policy.request_timeout_s, self.policy.ack_deadline_s)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return 200 <= response.status < 300, f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            return False, f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            return False, f"no answer: {exc}"


class Ticker:
    """Publishes a tick to ``topic`` every ``every_s`` seconds, as Cloud Scheduler would."""

    def __init__(self, project: str, topic: str, every_s: float, publisher: pubsub_v1.PublisherClient | None = None):
        self._publisher = publisher or pubsub_v1.PublisherClient()
        self._topic = ensure_topic(self._publisher, project, topic)
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zen-ticker", daemon=True)
        self.ticks = 0

    def start(self) -> "Ticker":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            payload = json.dumps({"scheduled_at": datetime.now(timezone.utc).isoformat()}).encode()
            try:
                self._publisher.publish(self._topic, payload).result(timeout=10)
                self.ticks += 1
            except Exception as exc:  # noqa: BLE001 - a missed tick is retried next period
                log.warning("tick not published", extra={"error": str(exc)})


def _route(text: str) -> Route:
    topic, sep, url = text.partition("=")
    if not sep or not topic or not url.startswith("http"):
        raise argparse.ArgumentTypeError(f"expected TOPIC=URL, got {text!r}")
    return Route(topic, url)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zen local bridge", description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", default="zen-local")
    parser.add_argument("--route", type=_route, action="append", default=[], metavar="TOPIC=URL",
                        help="deliver TOPIC to the function at URL (repeatable)")
    parser.add_argument("--tick-topic", default="zen-scale-tick")
    parser.add_argument("--tick-every", type=float, default=0, metavar="SECONDS",
                        help="publish a scale tick this often (0 = no ticker)")
    parser.add_argument("--max-attempts", type=int, default=5)
    parser.add_argument("--min-backoff", type=float, default=1.0)
    parser.add_argument("--max-backoff", type=float, default=60.0)
    parser.add_argument("--binary", action="store_true", help="binary-mode CloudEvents")
    args = parser.parse_args(argv)
    if not args.route and not args.tick_every:
        parser.error("give at least one --route or --tick-every")
    setup_logging()  # JSON lines, as Cloud Logging reads them
    policy = DeliveryPolicy(max_delivery_attempts=args.max_attempts, minimum_backoff_s=args.min_backoff,
                            maximum_backoff_s=args.max_backoff, binary_mode=args.binary)
    with stop_signals_heard() as wait_for_stop:
        bridge = EventBridge(args.project, args.route, policy).start()
        ticker = Ticker(args.project, args.tick_topic, args.tick_every).start() if args.tick_every else None
        print(f"event bridge: {len(args.route)} route(s)" + (f", tick every {args.tick_every:g}s" if ticker else ""),
              flush=True)
        wait_for_stop()
        if ticker:
            ticker.stop()
        bridge.stop()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
