"""Fakes for the agent tests.

- ``FakeTransport``: the agent's Transport port; records every call, scripts the scheduler's answers,
  and can inject the next errors. Waiting on the control queue advances a manual clock instead of
  sleeping (``virtual_time``), so claim timeouts and lease extensions are tested instantly.
- ``FakeMetadata``: a GCE metadata server on 127.0.0.1 (``failures``: the error statuses a path's next reads get).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from zen.agent.transport import ControlDelivery, StartDelivery, TransportError
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat, Message, StartMessage


class ManualMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeTransport:
    def __init__(self, vm: str, *, virtual_time: bool = True):
        self.vm = vm
        self.clock = ManualMonotonic() if virtual_time else time.monotonic
        self.virtual_time = virtual_time
        self.starts: deque[StartDelivery] = deque()
        self.controls: deque[ControlMessage | ControlDelivery] = deque()  # orders, and starts offered
        self.calls: list[tuple] = []  # ("ack" | "nack" | "extend" | "control_ack", ...)
        self.published: list[Message] = []
        self.fail_publish = 0  # the next N publishes raise TransportError
        self.fail_pull = 0  # the next N pulls raise TransportError
        self.answer: Callable[[Message], list[ControlMessage | ControlDelivery]] = lambda message: []
        self.when_idle: Callable[[], None] = lambda: None  # called when no start message is left
        self.closed_with: dict | None = None
        self._ids = 0

    # -- scripting -----------------------------------------------------------------------------
    def add_start(self, start: StartMessage | bytes) -> str:
        self._ids += 1
        data = start if isinstance(start, bytes) else start.to_bytes()
        delivery = StartDelivery(ack_id=f"ack-{self._ids}", message_id=str(self._ids), data=data, attributes={},
                                 delivery_attempt=1)
        self.starts.append(delivery)
        return delivery.ack_id

    def offer(self, start: StartMessage, vm: str | None = None) -> str:
        """A start offered to ``vm`` (this VM by default) on the control subscription, as Zen offers a
        warm VM a job (zen.jobs.announce); returns its ack_id as the agent sees it. Its ack is recorded as
        ("offer_ack", message id)."""
        self._ids += 1
        message_id = f"o-{self._ids}"
        self.controls.append(ControlDelivery(
            message_id, start.to_bytes(), {"vm": vm or self.vm, "kind": "start", "job_id": start.job_id,
                                           "attempt": str(start.attempt), "cluster": start.cluster},
            lambda: self.calls.append(("offer_ack", message_id))))
        return f"offer-{message_id}"

    def order(self, job_id: str, attempt: int, action: ControlAction, reason: str = "test") -> None:
        self.controls.append(ControlMessage(vm=self.vm, job_id=job_id, attempt=attempt, action=action, reason=reason))

    def answer_to(self, report: Heartbeat, action: ControlAction, *, answers: int | None = None,
                  refused: str | None = None) -> ControlDelivery:
        """Zen's order about ``report``'s attempt, carrying the attribute ``answers`` (the seq of the report
        it answers: ``report``'s unless given) as zen.jobs.announce sends it, and ``refused`` (a refused
        claim's cause) when given; its ack is recorded as ("control_ack", job_id, action)."""
        order = ControlMessage(vm=self.vm, job_id=report.job_id, attempt=report.attempt, action=action,
                               reason="test")
        attributes = {"vm": self.vm, "answers": str(report.seq if answers is None else answers)}
        return ControlDelivery(f"c-{id(order)}", order.to_bytes(), attributes | ({"refused": refused} if refused else {}),
                               lambda: self.calls.append(("control_ack", order.job_id, order.action.value)))

    def job_reports(self) -> list[tuple[str, int, str, int]]:
        return [(m.job_id, m.attempt, m.status.value, m.seq) for m in self.published if isinstance(m, Heartbeat)]

    def vm_states(self) -> list[str]:
        return [m.state.value for m in self.published if not isinstance(m, Heartbeat)]

    # -- the port ------------------------------------------------------------------------------
    def open_control(self) -> None:
        self.calls.append(("open_control",))

    def next_control(self, timeout_s: float) -> ControlDelivery | None:
        if self.controls:
            order = self.controls.popleft()
            if isinstance(order, ControlDelivery):  # a start offered, or an order with attributes of its own
                return order
            return ControlDelivery(f"c-{id(order)}", order.to_bytes(), {"vm": order.vm},
                                   lambda: self.calls.append(("control_ack", order.job_id, order.action.value)))
        if self.virtual_time:
            self.clock.now += timeout_s
        else:
            time.sleep(min(timeout_s, 0.02))
        return None

    def pull_start(self) -> StartDelivery | None:
        if self.fail_pull:
            self.fail_pull -= 1
            raise TransportError("injected pull failure")
        if self.starts:
            return self.starts.popleft()
        self.when_idle()
        return None

    def extend(self, delivery: StartDelivery, seconds: int) -> None:
        self.calls.append(("extend", delivery.ack_id, seconds))

    def ack(self, delivery: StartDelivery) -> None:
        self.calls.append(("ack", delivery.ack_id))
        if delivery.offer is not None:  # as PubSubTransport: an offer is acked on the control subscription
            delivery.offer()

    def nack(self, delivery: StartDelivery) -> None:
        self.calls.append(("nack", delivery.ack_id))
        if delivery.offer is not None:  # as PubSubTransport: an offer given back is dropped
            delivery.offer()

    def publish(self, message: Message, *, budget_s: float, abandon: Callable[[], bool] = lambda: False) -> None:
        if self.fail_publish:
            self.fail_publish -= 1
            raise TransportError("injected publish failure")
        self.published.append(message)
        self.controls.extend(self.answer(message))

    def learn_mac_key(self, sealed: str) -> None:
        self.calls.append(("learn_mac_key", sealed))

    def close(self, **options) -> None:
        self.closed_with = options  # {}: the agent asks for nothing more (it never deletes its subscription)


def confirm_claims(vm: str) -> Callable[[Message], list[ControlMessage]]:
    """The scheduler's answer when every claim wins."""

    def answer(message: Message) -> list[ControlMessage]:
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            return [ControlMessage(vm=vm, job_id=message.job_id, attempt=message.attempt,
                                   action=ControlAction.CONFIRM, reason="claim won")]
        return []

    return answer


def run_to_final(agent, transport: FakeTransport, job_id: str, within_s: float = 30) -> Heartbeat:
    """Run ``agent`` until ``job_id``'s final report is published (then shut it down, as a test ends), that report."""

    def final() -> Heartbeat | None:
        return next((m for m in transport.published if isinstance(m, Heartbeat) and m.job_id == job_id
                     and m.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)), None)

    def probe() -> None:
        deadline = time.monotonic() + within_s
        while final() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        agent.request_shutdown("test over")

    threading.Thread(target=probe, daemon=True).start()
    assert agent.run() == 0
    report = final()
    assert report is not None
    return report


class FakeMetadata:
    """A metadata server on 127.0.0.1 that, like the real one, insists on ``Metadata-Flavor: Google``."""

    def __init__(self, values: dict[str, str]):
        self.values = values
        self.failures: dict[str, list[int]] = {}  # path -> the statuses its next reads get (500, 503...)
        self.cut: dict[str, int] = {}  # path -> how many of its next reads get an answer cut off mid-body
        self.requests: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                fake.requests.append(self.path)
                if self.headers.get("Metadata-Flavor") != "Google":
                    self.send_error(403)
                    return
                path = self.path.removeprefix("/computeMetadata/v1/").split("?")[0]
                if fake.failures.get(path):
                    self.send_error(fake.failures[path].pop(0))
                    return
                if path not in fake.values:
                    self.send_error(404)
                    return
                body = fake.values[path].encode()
                if fake.cut.get(path):  # a connection dropped mid-answer: fewer bytes than its Content-Length
                    fake.cut[path] -= 1
                    self.send_response(200)
                    self.send_header("Metadata-Flavor", "Google")
                    self.send_header("Content-Length", str(len(body) + 10))
                    self.end_headers()
                    self.wfile.write(body)
                    self.close_connection = True
                    return
                self.send_response(200)
                self.send_header("Metadata-Flavor", "Google")
                # as the real one: JSON for a recursive read (google-auth reads the type), text otherwise
                self.send_header("Content-Type", "application/json" if body.startswith(b"{") else "application/text")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
