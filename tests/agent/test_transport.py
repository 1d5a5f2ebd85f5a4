"""The agent's Pub/Sub adapter against the Pub/Sub stand-in, through the official client."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest
from google.api_core import exceptions as gexc

from tests.agent.helpers import wait_for
from zen.agent.identity import Identity
from zen.agent.transport import PubSubTransport, TransportError, call_with_retries
from zen.core.models import ControlAction, ControlMessage
from zen_dev.local.topology import ensure_topology

VM = "vm-t"


@pytest.fixture
def transport(config, pubsub_clients):
    publisher_client, subscriber_client = pubsub_clients
    ensure_topology(config, publisher_client, subscriber_client)
    identity = Identity(project=config.project, vm=VM, cluster="4xa100-40gb", region="us-central1",
                        zone="us-central1-a", from_environment=True)
    # Its own clients: close() shuts them down, and the session's clients are shared.
    transport = PubSubTransport(config, identity)
    yield transport
    transport.close()


def publish(pubsub_clients, config, topic: str, data: bytes, **attributes) -> None:
    client = pubsub_clients[0]
    client.publish(client.topic_path(config.project, topic), data, **attributes).result(timeout=10)


def control(vm: str, job_id: str) -> bytes:
    return ControlMessage(vm=vm, job_id=job_id, attempt=1, action=ControlAction.CONFIRM).to_bytes()


def next_order(transport, timeout_s=10.0):
    delivery = wait_for(lambda: transport.next_control(0.2), timeout_s, 0, what="a control message")
    delivery.ack()
    return json.loads(delivery.data)


def test_the_control_subscription_is_filtered_to_this_vm_and_expires_by_itself(transport, config, pubsub_clients):
    transport.open_control()
    subscription = pubsub_clients[1].get_subscription(subscription=transport.control_subscription)
    assert subscription.filter == 'attributes.vm = "vm-t"'
    assert subscription.expiration_policy.ttl == timedelta(days=1)

    publish(pubsub_clients, config, "zen-vm-control", control("vm-other", "not-mine"), vm="vm-other")
    publish(pubsub_clients, config, "zen-vm-control", control(VM, "mine"), vm=VM)

    assert next_order(transport)["job_id"] == "mine"
    assert transport.next_control(0.5) is None


def test_a_control_subscription_deleted_underneath_is_recreated(transport, config, pubsub_clients):
    transport.open_control()
    pubsub_clients[1].delete_subscription(subscription=transport.control_subscription)

    def delivered():
        publish(pubsub_clients, config, "zen-vm-control", control(VM, "after"), vm=VM)
        return transport.next_control(1.0)

    order = wait_for(delivered, 20, 0, what="control stream back")
    order.ack()
    assert json.loads(order.data)["job_id"] == "after"


def test_close_leaves_the_control_subscription_to_expire_by_itself(transport, pubsub_clients):
    """The agent's role has no ``pubsub.subscriptions.delete``: it never deletes its subscription."""
    transport.open_control()
    transport.close()
    subscription = pubsub_clients[1].get_subscription(subscription=transport.control_subscription)
    assert subscription.expiration_policy.ttl == timedelta(days=1)


class Refusing:
    """Publisher and subscriber clients whose every call is refused, and whose stream never ends."""

    def __init__(self):
        self.calls = []

    def topic_path(self, project, name):
        return f"projects/{project}/topics/{name}"

    def subscription_path(self, project, name):
        return f"projects/{project}/subscriptions/{name}"

    def subscribe(self, *args, **kwargs):
        class Stream:
            def cancel(self):
                pass

            def result(self, timeout=None):
                time.sleep(min(timeout, 30))
                raise TimeoutError

        return Stream()

    def __getattr__(self, name):
        def refused(*args, **kwargs):
            self.calls.append(name)
            raise gexc.PermissionDenied(f"{name}: refused")

        return refused


def test_close_never_asks_to_delete_and_keeps_to_its_budget(config):
    from zen.agent.transport import STREAM_CLOSE_S

    clients = Refusing()
    identity = Identity(project=config.project, vm=VM, cluster="4xa100-40gb", region="us-central1",
                        zone="us-central1-a", from_environment=True)
    transport = PubSubTransport(config, identity, publisher=clients, subscriber=clients)
    transport._open_stream()
    began = time.monotonic()

    transport.close()

    assert time.monotonic() - began < STREAM_CLOSE_S + 1
    assert "delete_subscription" not in clients.calls and {"stop", "close"} <= set(clients.calls)


def test_start_messages_are_pulled_one_at_a_time_and_nack_gives_them_back(transport, config, pubsub_clients):
    attributes = {"cluster": "4xa100-40gb", "allow_any": "1"}
    publish(pubsub_clients, config, "zen-job-start", b'{"n": 1}', **attributes)
    publish(pubsub_clients, config, "zen-job-start", b'{"n": 2}', **attributes)

    first = wait_for(transport.pull_start, 10, what="first start message")
    second = wait_for(transport.pull_start, 10, what="second start message")
    assert {first.data, second.data} == {b'{"n": 1}', b'{"n": 2}'}
    assert transport.pull_start() is None  # both are leased

    transport.extend(first, 30)
    transport.ack(first)
    transport.nack(second)
    again = wait_for(transport.pull_start, 10, what="the nacked message again")
    assert again.data == second.data and again.message_id == second.message_id


def test_start_messages_for_another_region_never_reach_this_vm(transport, config, pubsub_clients):
    publish(pubsub_clients, config, "zen-job-start", b"{}", cluster="4xa100-40gb", allow_europe_west4="1")
    assert transport.pull_start() is None


# -- retries ---------------------------------------------------------------------------------------
class Clock:
    def __init__(self):
        self.now = 0.0
        self.pauses = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.pauses.append(seconds)
        self.now += seconds


def failing(errors, result="ok"):
    errors = list(errors)

    def call():
        if errors:
            raise errors.pop(0)
        return result

    return call


def test_transient_errors_are_retried_with_growing_pauses():
    clock = Clock()
    call = failing([gexc.ServiceUnavailable("down")] * 3)
    assert call_with_retries("x", call, budget_s=30, sleep=clock.sleep, clock=clock) == "ok"
    assert len(clock.pauses) == 3 and clock.pauses[2] > clock.pauses[0]


def test_retries_stop_at_the_budget():
    clock = Clock()
    with pytest.raises(TransportError, match="still failing"):
        call_with_retries("x", failing([gexc.DeadlineExceeded("slow")] * 1000), budget_s=5, sleep=clock.sleep,
                          clock=clock)
    assert clock.now <= 5


def test_a_permanent_error_is_not_retried():
    clock = Clock()
    with pytest.raises(TransportError, match="PermissionDenied"):
        call_with_retries("x", failing([gexc.PermissionDenied("no")]), budget_s=30, sleep=clock.sleep, clock=clock)
    assert clock.pauses == []


def test_a_heartbeat_waiting_on_a_silent_pubsub_gives_up_once_told_to(config, monkeypatch):
    """A RUNNING heartbeat's publish waited out its whole budget (10 s) when Pub/Sub did not answer, and a
    preemption notice that came meanwhile reached the job that much later (GCE gives ~30 s in all). Told
    to give up (the VM shuts down), it stops waiting within a slice: here against a server that accepts
    connections and never answers, through the official client."""
    import socket
    import threading

    from google.cloud import pubsub_v1

    from zen.agent.transport import ABANDON_SLICE_S
    from zen.core.models import AgentStatus, Heartbeat

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held: list[socket.socket] = []

    def accept() -> None:
        try:
            while True:
                held.append(silent.accept()[0])
        except OSError:  # closed at the end
            pass

    threading.Thread(target=accept, daemon=True).start()
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", f"127.0.0.1:{silent.getsockname()[1]}")
    identity = Identity(project=config.project, vm=VM, cluster="4xa100-40gb", region="us-central1",
                        zone="us-central1-a", from_environment=True)
    publisher = pubsub_v1.PublisherClient()
    transport = PubSubTransport(config, identity, publisher=publisher, subscriber=pubsub_v1.SubscriberClient())
    beat = Heartbeat(job_id="j1", attempt=1, vm=VM, region="us-central1", zone="us-central1-a",
                     status=AgentStatus.RUNNING, seq=1, sent_at=datetime.now(timezone.utc))
    began = time.monotonic()
    told = began + 0.5
    try:
        with pytest.raises(TransportError, match="abandoned"):
            transport.publish(beat, budget_s=10.0, abandon=lambda: time.monotonic() >= told)
        assert time.monotonic() - told < 2 * ABANDON_SLICE_S + 0.5  # not the 10 s budget
    finally:  # the client's batch thread gives up once the server is gone
        silent.close()
        for connection in held:
            connection.close()


def test_a_control_message_carries_its_publish_time(transport, config, pubsub_clients):
    """A STOP's deadline counts from when Pub/Sub took it (zen.agent.reports.AttemptReport.stopped)."""
    transport.open_control()
    before = datetime.now(timezone.utc) - timedelta(seconds=5)
    publish(pubsub_clients, config, "zen-vm-control", control(VM, "stamped"), vm=VM)

    delivery = wait_for(lambda: transport.next_control(0.2), 10.0, 0, what="a control message")
    delivery.ack()
    assert delivery.published is not None and before <= delivery.published <= datetime.now(timezone.utc) + timedelta(seconds=5)
