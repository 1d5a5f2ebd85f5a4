"""Lifecycle of the Pub/Sub stand-in: :class:`PubSubStandIn` and the ``main`` entry point.

Owns the gRPC server object (thread pool, binding, start/stop) and the command line
(``python -m zen_dev.local.pubsub --port N``, wired to ``zen local pubsub``). Point the official
client at it with ``PUBSUB_EMULATOR_HOST=<address>``.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import grpc

from zen.logs import setup_logging
from zen_dev.local.until_stopped import stop_signals_heard

from .iam import IamPolicyService
from .service import PublishFaults, PublisherService, SubscriberService, UnimplementedService
from .state import PubSubState

DEFAULT_PORT = 8085  # the port the official emulator uses by default
MAX_WORKERS = 64  # every open StreamingPull holds one worker for its lifetime


def all_handlers(state: PubSubState, faults: PublishFaults | None = None) -> list[grpc.GenericRpcHandler]:
    return [
        PublisherService(state, faults).handlers(),
        SubscriberService(state).handlers(),
        IamPolicyService(state).handlers(),
        UnimplementedService(),
    ]


class PubSubStandIn:
    """A local gRPC server speaking enough of google.pubsub.v1 for the official clients.

    ``clock`` (seconds since the epoch, like ``time.time``) drives publish times, ack
    deadlines, retention and expiration; after advancing an injected clock call :meth:`wake`.
    ``faults``: the publishes a test makes fail (``PublishFaults.refuse``).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] | None = None,
        *,
        max_workers: int = MAX_WORKERS,
    ) -> None:
        self.host = host
        self._requested_port = port
        self._max_workers = max_workers
        self.state = PubSubState(clock)
        self.faults = PublishFaults()
        self._server: grpc.Server | None = None
        self._port: int | None = None

    def start(self) -> "PubSubStandIn":
        if self._server is not None:
            raise RuntimeError("the Pub/Sub stand-in is already started")
        server = grpc.server(
            ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="pubsub-standin"),
            handlers=all_handlers(self.state, self.faults),
            # Pub/Sub takes a Publish request of up to 10 MB of messages and answers INVALID_ARGUMENT past that
            # (resources.MAX_PUBLISH_BYTES): gRPC's own limit, 4 MB by default, must not refuse one first.
            options=[("grpc.max_receive_message_length", -1)],
        )
        port = server.add_insecure_port(f"{self.host}:{self._requested_port}")
        if not port:
            raise RuntimeError(f"could not bind {self.host}:{self._requested_port}")
        server.start()
        self._server, self._port = server, port
        return self

    def stop(self, grace: float | None = None) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self.state.shutdown()
        server.stop(grace).wait()

    def wake(self) -> None:
        """Apply time-based rules now (useful after advancing an injected clock)."""
        self.state.wake()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the Pub/Sub stand-in is not started")
        return self._port

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __enter__(self) -> "PubSubStandIn":
        return self.start() if self._server is None else self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="zen local pubsub",
        description="Run a local stand-in for Google Cloud Pub/Sub (gRPC). Point clients at it "
        "with PUBSUB_EMULATOR_HOST=HOST:PORT.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to bind, 0 = any free port (default {DEFAULT_PORT})",
    )
    args = parser.parse_args(argv)
    setup_logging()  # JSON lines, as Cloud Logging reads them

    standin = PubSubStandIn(args.host, args.port)
    with stop_signals_heard() as wait_for_stop:
        try:
            standin.start()
            print(f"pubsub stand-in listening on {standin.address}", flush=True)
            wait_for_stop()
        finally:
            standin.stop(grace=1.0)
    return 0
