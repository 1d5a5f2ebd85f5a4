"""The agent's Pub/Sub adapter, over the official ``google-cloud-pubsub`` client only
(``PUBSUB_EMULATOR_HOST`` points it at the local stand-in): a synchronous pull of one start message at
a time, the VM's control subscription (checked, made where the agent may, read by a streaming pull;
it also carries starts offered to this VM alone), and heartbeats published with their proof. Transient
errors are retried with backoff within a budget; past it, ``TransportError``.
Why: docs/reference/agent.md#pubsub
"""

from __future__ import annotations

import logging
import os
import queue
import random
import time
from datetime import timedelta
from typing import Callable, Protocol, TypeVar

from google.api_core import exceptions as gexc
import google.cloud.pubsub_v1 as pubsub_v1
from google.pubsub_v1 import types as T

from zen.agent.deliveries import ControlDelivery as ControlDelivery, StartDelivery as StartDelivery  # named here too
from zen.agent.identity import Identity, ProofSource
from zen.core.config import ZenConfig
from zen.core.errors import ZenError
from zen.core.models import Message

log = logging.getLogger("zen.agent.transport")
Result = TypeVar("Result")

TRANSIENT = (
    gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError, gexc.Aborted,
    gexc.ResourceExhausted, gexc.Unknown, gexc.GatewayTimeout, gexc.RetryError, TimeoutError, ConnectionError,
)
ABANDON_SLICE_S = 0.25  # how often a heartbeat's publish waiting for Pub/Sub asks whether to give up
CONTROL_TTL = timedelta(days=1)  # Pub/Sub's minimum expiration TTL
CONTROL_RETENTION = timedelta(hours=1)  # orders older than this are moot
CONTROL_ACK_DEADLINE_S = 30
CONTROL_WAIT_S = 600.0  # how long an agent that may not make its control subscription waits for Zen's
CONTROL_POLL_S = 2.0
STREAM_CLOSE_S = 2.0  # the most close() waits for the control stream to end (the VM is shutting down)


class TransportError(ZenError):
    """Pub/Sub kept failing past the retry budget, or refused for good."""


def call_with_retries(what: str, call: Callable[[], Result], *, budget_s: float, first_pause_s: float = 0.2,
                      max_pause_s: float = 5.0, sleep: Callable[[float], None] = time.sleep,
                      clock: Callable[[], float] = time.monotonic, abandon: Callable[[], bool] = lambda: False
                      ) -> Result:
    """``call()``, retrying transient errors with backoff for at most ``budget_s`` seconds, and none once
    ``abandon()`` says so."""
    deadline = clock() + budget_s
    pause = first_pause_s
    tries = 0
    while True:
        tries += 1
        try:
            return call()
        except TRANSIENT as exc:
            remaining = deadline - clock()
            if remaining <= 0 or abandon():
                raise TransportError(f"{what}: still failing after {tries} tries{' (abandoned)' if remaining > 0 else ''}"
                                     f": {type(exc).__name__}: {exc}") from exc
            wait = min(remaining, pause * random.uniform(0.5, 1.0))
            log.warning("transient Pub/Sub error; retrying", extra={
                "what": what, "error": f"{type(exc).__name__}: {exc}", "retry_in_s": round(wait, 2)})
            sleep(wait)
            pause = min(pause * 2, max_pause_s)
        except gexc.GoogleAPICallError as exc:
            raise TransportError(f"{what}: {type(exc).__name__}: {exc}") from exc


class Transport(Protocol):
    """What the agent loop (``zen.agent.agent``) needs from Pub/Sub: the port ``PubSubTransport`` adapts."""

    def open_control(self) -> None: ...
    def next_control(self, timeout_s: float) -> ControlDelivery | None: ...
    def pull_start(self) -> StartDelivery | None: ...
    def extend(self, delivery: StartDelivery, seconds: int) -> None: ...
    def ack(self, delivery: StartDelivery) -> None: ...
    def nack(self, delivery: StartDelivery) -> None: ...
    def publish(self, message: Message, *, budget_s: float, abandon: Callable[[], bool] = ...) -> None: ...
    def learn_mac_key(self, sealed: str) -> None: ...
    def close(self) -> None: ...


class PubSubTransport:
    # An idle agent's pull waits this long for a start; offered starts (control stream) are looked at
    # between pulls, so this bounds how long an offer waits for an idle VM (zen.agent.agent).
    def __init__(self, config: ZenConfig, identity: Identity, *, pull_timeout_s: float = 3.0,
                 publisher: pubsub_v1.PublisherClient | None = None,
                 subscriber: pubsub_v1.SubscriberClient | None = None, proof: ProofSource | None = None):
        self._publisher = publisher or pubsub_v1.PublisherClient()
        self._proof = proof or ProofSource.from_env(os.environ, identity)  # None: heartbeats carry no token
        self._subscriber = subscriber or pubsub_v1.SubscriberClient()
        project = identity.project
        self.start_subscription = self._subscriber.subscription_path(
            project, config.job_start_subscription(identity.cluster, identity.region))
        self.control_subscription = self._subscriber.subscription_path(
            project, config.vm_control_subscription(identity.vm))
        self._control_topic = self._publisher.topic_path(project, config.topics.vm_control)
        self._control_filter = config.vm_control_filter(identity.vm)
        self._heartbeats = self._publisher.topic_path(project, config.topics.heartbeats)
        self._vm = identity.vm
        self._pull_timeout_s = pull_timeout_s
        self._inbox: queue.Queue = queue.Queue()
        self._stream = None
        self._reopen_at = 0.0
        self._reopen_pause_s = 1.0

    # -- control subscription --------------------------------------------------------------------
    def open_control(self, budget_s: float = 120.0, wait_s: float = CONTROL_WAIT_S) -> None:
        """Make (or check and reuse) this VM's control subscription and start consuming it; where Zen makes
        it, wait for it at most ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while not call_with_retries("set up the control subscription", self._ensure_control, budget_s=budget_s):
            if time.monotonic() >= deadline:
                raise TransportError(f"control subscription {self.control_subscription} not made by Zen "
                                     f"within {wait_s:g} s, and this VM may not make it")
            time.sleep(CONTROL_POLL_S)
        self._open_stream()

    def _ensure_control(self) -> bool:
        """True once this VM's control subscription exists on ``zen-vm-control`` with this VM's filter;
        False while it is missing and this agent may not create it (Zen makes it). A subscription of that
        name on another topic or with another filter would swallow this VM's orders (a claim never
        confirmed, a stop never obeyed): it is deleted and made again, or, where the agent may not
        delete it, the agent refuses to start (``TransportError``)."""
        try:
            current = self._subscriber.get_subscription(subscription=self.control_subscription)
        except gexc.NotFound:
            current = None
        if current is not None:
            if current.topic == self._control_topic and current.filter == self._control_filter:
                log.info("control subscription reused", extra={"vm": self._vm, "subscription": self.control_subscription})
                return True
            log.error("control subscription has the wrong topic or filter; replacing it", extra={
                "vm": self._vm, "subscription": self.control_subscription, "topic": current.topic,
                "filter": current.filter, "expected_filter": self._control_filter})
            try:
                self._subscriber.delete_subscription(subscription=self.control_subscription)
            except gexc.NotFound:
                pass
            except gexc.PermissionDenied as exc:
                raise TransportError(
                    f"control subscription {self.control_subscription} has topic {current.topic!r} and filter "
                    f"{current.filter!r}, not {self._control_filter!r}, and this VM may not delete it: "
                    "refusing to start (the VM would never get its confirms and stops)") from exc
        subscription = T.Subscription(
            name=self.control_subscription, topic=self._control_topic, filter=self._control_filter,
            ack_deadline_seconds=CONTROL_ACK_DEADLINE_S, message_retention_duration=CONTROL_RETENTION,
            expiration_policy=T.ExpirationPolicy(ttl=CONTROL_TTL),
        )
        try:
            self._subscriber.create_subscription(request=subscription)
        except gexc.AlreadyExists:
            return False  # made meanwhile (by Zen, or by someone else): checked on the next call
        except gexc.PermissionDenied:
            log.info("waiting for Zen to make the control subscription", extra={
                "vm": self._vm, "subscription": self.control_subscription})
            return False
        log.info("control subscription created", extra={"vm": self._vm, "subscription": self.control_subscription})
        return True

    def _open_stream(self) -> None:
        self._stream = self._subscriber.subscribe(
            self.control_subscription, callback=self._inbox.put,
            flow_control=pubsub_v1.types.FlowControl(max_messages=100),
        )

    def _watch_stream(self) -> None:
        """Reopen the control stream if it died (the client already retries transient errors)."""
        if self._stream is None or not self._stream.done() or time.monotonic() < self._reopen_at:
            return
        try:
            error = self._stream.exception(timeout=0)
        except Exception as exc:  # noqa: BLE001 - a cancelled future raises here
            error = exc
        log.warning("control stream ended; reopening", extra={"vm": self._vm, "error": str(error)})
        self._reopen_at = time.monotonic() + self._reopen_pause_s
        self._reopen_pause_s = min(self._reopen_pause_s * 2, 30.0)
        try:
            if self._ensure_control():  # it may have expired, been deleted, or been replaced
                self._open_stream()
                self._reopen_pause_s = 1.0
        except (gexc.GoogleAPICallError, *TRANSIENT) as exc:
            log.warning("control stream not reopened yet", extra={"vm": self._vm, "error": str(exc)})

    def next_control(self, timeout_s: float) -> ControlDelivery | None:
        """The next control message, waiting at most ``timeout_s``."""
        self._watch_stream()
        try:
            message = self._inbox.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return None
        return ControlDelivery(message.message_id, bytes(message.data), dict(message.attributes), message.ack,
                               message.publish_time)

    # -- start subscription ----------------------------------------------------------------------
    def pull_start(self, budget_s: float = 30.0) -> StartDelivery | None:
        """Lease at most one start message; ``None`` when there is none right now."""
        def pull():
            try:
                return self._subscriber.pull(subscription=self.start_subscription, max_messages=1,
                                             timeout=self._pull_timeout_s, retry=None)
            except gexc.DeadlineExceeded:
                return None  # a long poll that found nothing

        response = call_with_retries("pull a start message", pull, budget_s=budget_s)
        if response is None or not response.received_messages:
            return None
        received = response.received_messages[0]
        message = received.message
        return StartDelivery(received.ack_id, message.message_id, bytes(message.data), dict(message.attributes),
                             received.delivery_attempt)

    # A start offered on the control subscription (``delivery.offer``) is leased by the control stream
    # while this process holds it (the client extends it), and is only ever acked: given back, it is
    # dropped, since its job's start is widened to the start subscriptions by the tick (ControlRouter).
    def extend(self, delivery: StartDelivery, seconds: int, budget_s: float = 10.0) -> None:
        if delivery.offer is not None:
            return
        call_with_retries("extend the start message's lease", lambda: self._subscriber.modify_ack_deadline(
            subscription=self.start_subscription, ack_ids=[delivery.ack_id], ack_deadline_seconds=seconds),
            budget_s=budget_s)

    def ack(self, delivery: StartDelivery, budget_s: float = 10.0) -> None:
        if delivery.offer is not None:
            delivery.offer()
            return
        call_with_retries("ack the start message", lambda: self._subscriber.acknowledge(
            subscription=self.start_subscription, ack_ids=[delivery.ack_id]), budget_s=budget_s)

    def nack(self, delivery: StartDelivery, budget_s: float = 10.0) -> None:
        """Give the message back now (a deadline of 0), for another VM or a later pull; an offer is dropped."""
        if delivery.offer is not None:
            delivery.offer()
            return
        self.extend(delivery, 0, budget_s)

    # -- heartbeats ------------------------------------------------------------------------------
    def publish(self, message: Message, *, budget_s: float, abandon: Callable[[], bool] = lambda: False) -> None:
        """Publish a heartbeat within ``budget_s``; ``TransportError`` if it could not, or once ``abandon()``
        said to give up (looked at every ``ABANDON_SLICE_S`` while Pub/Sub has not answered)."""
        data = message.to_bytes()
        base = {"kind": getattr(message, "kind", "job"), "vm": self._vm}
        proof = self._proof
        if proof is not None and proof.required and not proof.token() and proof.next_fetch_in() >= budget_s:
            raise TransportError("no VM identity token from the metadata server, and none asked for again "
                                 f"within this heartbeat's {budget_s:g} s")

        def once():
            # A VM that proves its heartbeats (zen.adapters.vm_proof) sends none without its token while Zen
            # requires one: Zen would reject it and ack it, and a final report would be lost. No token
            # yet is a transient failure (the metadata server unreachable), retried within the report's
            # budget. With Zen's vm_proof off, the heartbeat goes bare.
            attributes = dict(base)  # afresh each try: a new token may come in fewer pieces
            if proof is not None:
                if token := proof.token():
                    attributes.update(proof.attributes(token, data, attributes))
                elif proof.required:
                    raise ConnectionError("no VM identity token from the metadata server yet")
            future = self._publisher.publish(self._heartbeats, data, **attributes)
            until = time.monotonic() + max(1.0, min(budget_s, 30.0))
            while True:
                try:
                    return future.result(timeout=max(0.0, min(ABANDON_SLICE_S, until - time.monotonic())))
                except TimeoutError:
                    if abandon():
                        raise TransportError("publish a heartbeat: abandoned while Pub/Sub had not answered") from None
                    if time.monotonic() >= until:
                        raise

        call_with_retries("publish a heartbeat", once, budget_s=budget_s, abandon=abandon)

    def learn_mac_key(self, sealed: str) -> None:
        """The MAC key a CONFIRM carried (``zen.adapters.message_key``): heartbeats carry their MAC from now on."""
        if self._proof is not None:
            self._proof.learn(sealed)

    # -- shutdown --------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the control stream and the clients; never raises, and takes at most ``STREAM_CLOSE_S``
        besides the clients' own close.

        The control subscription is left: it expires after a day unread (``CONTROL_TTL``), or is deleted by the
        scale tick once the VM's MIG no longer lists it, and a VM recreated under the same name (a preempted spot
        VM, a restarted agent) reuses it. Deleting it at shutdown needed ``pubsub.subscriptions.delete``, which the
        agent's role no longer grants (the tick's does): every delete would fail, and a failing one was retried for
        up to 10 s of the few seconds a preempted VM has. Orders left in it (kept an hour at most,
        ``CONTROL_RETENTION``) are about attempts the next agent there does not hold, and are ignored
        (``ControlRouter``)."""
        if self._stream is not None:
            self._stream.cancel()
            try:
                self._stream.result(timeout=STREAM_CLOSE_S)
            except Exception:  # noqa: BLE001 - a cancelled stream's future raises; that is expected
                pass
        for close in (self._publisher.stop, self._subscriber.close):
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - shutting down anyway
                log.debug("client close failed", extra={"error": str(exc)})
