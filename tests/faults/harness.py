"""A stack to throw faults at: the functions served as Cloud Run serves them, and a way to deliver.

``FaultStack`` starts, for itself alone: an embedded Postgres (its own data directory, so that it
can be restarted mid-burst without disturbing anything else), a migrated ``zen`` database, the
Pub/Sub stand-in with Zen's topics, and the three message functions, each under functions-framework
as its own process (gunicorn with ``THREADS`` request threads: production's concurrency), logged in
to Postgres as a member of its function's database role alone (migration 0030), as deployed. Each
function builds its Zen lazily from the environment on its first request, as in production, with
scaling off (this suite is about the message edge and the database, not Compute).

``deliver_all`` posts CloudEvents over HTTP from ``workers`` threads at once, as Eventarc does, and
can redeliver what was answered 5xx, as Pub/Sub does.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import requests

from zen.core import eventarc
from zen.core.config import load_config
from zen.store.db import Database, parse_database_url
from zen.store.migrate import migrate
from zen_dev.local.roles import function_logins

TARGETS = ("on_job_submitted", "on_heartbeat", "on_stop_requested")


@dataclass
class Delivery:
    """One message as Eventarc delivers it: a CloudEvent for ``target``.

    ``payload`` is the Pub/Sub message's data. ``envelope`` (optional) replaces keys of the
    CloudEvent (a fuzzed envelope); ``data`` inside it replaces the Pub/Sub part wholesale.
    """

    target: str
    payload: bytes
    message_id: str
    envelope: dict[str, Any] | None = None
    binary: bool = False
    attributes: dict[str, str] | None = None  # the Pub/Sub message's (a sender's zen_auth token)
    note: str = ""  # what the generator meant (for reports)
    responses: list[int] = field(default_factory=list)

    @property
    def final_status(self) -> int:
        return self.responses[-1] if self.responses else 0


class FaultStack:
    def __init__(self, *, threads: int = 4, project: str = "zen-faults", log_dir: Path | None = None,
                 extra_env: dict[str, str] | None = None):
        self.threads = threads
        self.project = project
        self.config = load_config(extra_env["ZEN_CONFIG"] if extra_env and "ZEN_CONFIG" in extra_env else None
                                  ).model_copy(update={"project": project})
        self.log_dir = log_dir
        self.extra_env = extra_env or {}  # the functions' (a configuration, ZEN_AUTH: tests.faults.auth)
        self._local = threading.local()

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> "FaultStack":
        from google.cloud import pubsub_v1

        from zen_dev.embedded import server_url, start_server
        from zen_dev.local.bridge import ensure_topic
        from zen_dev.local.environment import overridden_environ
        from zen_dev.local.functions_server import WARM_CORE, Function, FunctionGroup
        from zen_dev.local.pubsub import PubSubStandIn

        self.pg_dir = tempfile.mkdtemp(prefix="zft", dir="/tmp")  # unix socket paths are short
        self.pg = start_server(self.pg_dir, cleanup_mode="stop")
        server = parse_database_url(server_url(self.pg))
        admin = Database.from_target(server)
        with admin.session() as session:
            session.execute("CREATE DATABASE zen")
        admin.close()
        self.target = server.with_database("zen")
        self.db = Database.from_target(self.target)
        migrate(self.db)
        self.pubsub = PubSubStandIn().start()
        with overridden_environ({"PUBSUB_EMULATOR_HOST": self.pubsub.address}):
            publisher = pubsub_v1.PublisherClient()
            subscriber = pubsub_v1.SubscriberClient()
            for topic in self.config.topics.model_dump().values():
                path = ensure_topic(publisher, self.project, topic)
                subscriber.create_subscription(name=subscriber.subscription_path(self.project, f"seen-{topic}"),
                                               topic=path)
        socket_dir = os.path.dirname(self.target.unix_sock)
        env = {
            "ZEN_DATABASE_URL": f"postgresql://{self.target.user}@/zen?host={socket_dir}",
            "PUBSUB_EMULATOR_HOST": self.pubsub.address, "ZEN_PROJECT": self.project, "ZEN_SCALING": "off",
            "THREADS": str(self.threads), "ZEN_LOG_LEVEL": "ERROR",
            "ZEN_VM_PROOF": "off",  # its heartbeats come from made-up VMs, without tokens (zen.adapters.vm_proof)
            **self.extra_env,
        }
        logins = function_logins(self.target.url())  # each function as its own database role, as deployed
        functions = [Function(target, 0, self.log_dir / f"{target}.log" if self.log_dir else None,
                              {"ZEN_DATABASE_URL": logins[target]}) for target in TARGETS]
        self.functions = FunctionGroup(functions, env=env, warm=WARM_CORE)  # no Compute here (ZEN_SCALING=off)
        self.functions.start(timeout_s=60)
        return self

    def stop(self) -> None:
        if hasattr(self, "functions"):
            self.functions.stop()
        if hasattr(self, "db"):
            self.db.close()
        if hasattr(self, "pubsub"):
            self.pubsub.stop()
        if hasattr(self, "pg"):
            self.pg.cleanup()
            shutil.rmtree(self.pg_dir, ignore_errors=True)

    def __enter__(self) -> "FaultStack":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def restart_database(self) -> float:
        """Restart Postgres (fast shutdown: every connection is cut); returns the seconds it took."""
        from pgserver._commands import pg_ctl

        began = time.monotonic()
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=self.pg.pgdata, user=self.pg.system_user, timeout=60)
        return time.monotonic() - began

    # -- delivery ------------------------------------------------------------------------------
    def topic(self, target: str) -> str:
        topics = self.config.topics
        return {"on_job_submitted": topics.job_submitted, "on_heartbeat": topics.heartbeats,
                "on_stop_requested": topics.job_stop}[target]

    def request_of(self, delivery: Delivery) -> tuple[bytes, dict[str, str]]:
        event = eventarc.pubsub_cloud_event(delivery.payload, message_id=delivery.message_id,
                                            topic=self.topic(delivery.target), project=self.project,
                                            attributes=delivery.attributes)
        if delivery.envelope:
            event.update(delivery.envelope)
        if delivery.binary:
            body, headers = eventarc.binary_request(event)
            if all(_header_safe(v) for v in headers.values()):
                return body, headers
        return json.dumps(event).encode("utf-8", "surrogatepass"), {"Content-Type": "application/cloudevents+json"}

    def post(self, delivery: Delivery) -> int:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        body, headers = self.request_of(delivery)
        try:
            response = session.post(self.functions.url(delivery.target), data=body, headers=headers, timeout=60)
            status = response.status_code
        except requests.RequestException:
            status = 599  # the connection broke: as bad as a 500
        delivery.responses.append(status)
        return status

    def deliver_all(self, deliveries: Iterable[Delivery], *, workers: int = 4, redeliver_5xx: bool = False,
                    redeliver_for_s: float = 60.0) -> list[Delivery]:
        """Post every delivery from ``workers`` threads. With ``redeliver_5xx``, a 5xx is posted again
        (after a short backoff) until acked or ``redeliver_for_s`` passes, as Pub/Sub would."""
        deliveries = list(deliveries)

        def one(delivery: Delivery) -> None:
            status = self.post(delivery)
            deadline = time.monotonic() + redeliver_for_s
            backoff = 0.1
            while redeliver_5xx and status >= 500 and time.monotonic() < deadline:
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                status = self.post(delivery)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one, deliveries))
        return deliveries

    # -- reading back --------------------------------------------------------------------------
    def query(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        from zen.core.errors import TransientError

        for attempt in range(3):  # pooled connections die with a restart: the pool drops them
            try:
                with self.db.transaction() as session:
                    return session.sql(sql, **params)
            except TransientError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def _header_safe(value: str) -> bool:
    """HTTP cannot carry control characters in a header, nor whitespace around a value (HTTP strips it;
    the client refuses to send it); Eventarc's ``ce-`` headers are ASCII. Others go as structured mode."""
    return all(" " <= ch <= "~" for ch in value) and value == value.strip()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
