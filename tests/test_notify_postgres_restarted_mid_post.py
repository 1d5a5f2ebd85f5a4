"""Postgres restarted (a Cloud SQL maintenance restart, a failover, a link reset) while the notifier's POST was in
flight: the connection the notifier had used to claim the delivery went back to the pool alive and was dead when it
came to record the answer. The record failed on it (its BEGIN), the event answered 500, and once the claim's hold
was over its redelivery POSTed the notice again: a second Slack message, e-mail or webhook call for one job's end,
though Postgres had been back before the answer came. A pooled connection found dead at its BEGIN (nothing of the
transaction sent yet) is now replaced by a new one (``zen.store.db.Database.transaction``), and the notice is told
once."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.messages import agent_run, job_request
from tests.notify_support import notifying_config, secret
from zen.app import Zen
from zen.store.db import Database
from zen_dev.local.secret_manager import SecretManagerStandIn, SecretStore


class RestartingSink:
    """A webhook receiver that, at its first POST, ends the other connections to the job database (as a restart of
    Postgres would; but ``spared``, the test database's own keeper) and waits until they are gone before it answers
    200; every POST answered 200."""

    def __init__(self, admin: Database, database: str, spared: int):
        self.posts: list[dict[str, Any]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                sink.posts.append(json.loads(body))
                with admin.session() as session:
                    ended = [r["pid"] for r in session.sql(  # (OFFSET 0: the filter first, then the ending)
                        "SELECT pid FROM (SELECT pid FROM pg_stat_activity WHERE datname = :d AND pid NOT IN "
                        "(pg_backend_pid(), :spared) OFFSET 0) AS o WHERE pg_terminate_backend(pid)",
                        d=database, spared=spared)] if len(sink.posts) == 1 else []
                    while ended and session.sql("SELECT 1 AS x FROM pg_stat_activity WHERE pid = ANY(CAST(:p AS int[]))",
                                                p="{" + ",".join(map(str, ended)) + "}"):
                        pass
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook/t0ken"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def restarting(db_target, _reused_db):
    admin = Database(db_target.connect)  # the operator's connection: on the same database, never ended
    sink = RestartingSink(admin, db_target.database, _reused_db.keeper.run("SELECT pg_backend_pid()")[0][0])
    yield sink
    sink.close()
    admin.close()


def test_a_notice_is_posted_once_when_postgres_restarted_during_its_post(
        config, db, publisher, clock, db_url, restarting, monkeypatch):
    from zen_dev.local.invoke import FunctionsInvoker

    store = SecretStore({secret(config, "zen-notify-hook"): restarting.url}, granted=[secret(config, "zen-notify-hook")])
    with SecretManagerStandIn(store) as standin:
        monkeypatch.setenv("ZEN_SECRETS_ENDPOINT", standin.endpoint)
        monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
        zen = Zen(notifying_config(config, timeout_s=10.0), db, publisher, clock)
        functions = FunctionsInvoker(zen)
        hook = {"webhook": f"{secret(config, 'zen-notify-hook')}/versions/latest", "on": ["FAILED"]}
        functions.submit(job_request("nf-1", notify=[hook]))
        for beat in agent_run("nf-1", final="FAILED", exit_code=3):
            functions.heartbeat(beat)
        [ended] = [m for m in publisher.on("zen-job-events") if m.attributes.get("status") == "FAILED"]

        first = functions.send("on_job_event", ended.data, attributes=ended.attributes, message_id="e-1")
        clock.advance(120)  # past the claim's hold: what a redelivery of a 500 would find
        again = functions.send("on_job_event", ended.data, attributes=ended.attributes, message_id="e-1")

    assert [p["event"] for p in restarting.posts] == ["FAILED"]  # told once
    assert (first.status_code, again.status_code) == (200, 200)
