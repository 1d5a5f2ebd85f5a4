"""A database that never answers (a proxy or load balancer whose backend is gone) is given up on after
``CONNECT_TIMEOUT_S``: pg8000 had no timeout, and every command waited for ever, `zen stop` of a runaway job too
(and a function until Cloud Functions' own timeout). Once connected, a query waits as long as it runs."""

from __future__ import annotations

import socket
import ssl
import threading
import time

import pg8000.dbapi
import pytest

from tests.test_cli_deployed_messages import silent_database, silent_server  # noqa: F401 - fixture
from zen.core.errors import TransientError
from zen.store import connect as dbmod
from zen.store.connect import _NativeOverDbApi
from zen.store.db import Database, parse_database_url


def test_a_database_that_never_answers_is_given_up_on(silent_database, monkeypatch):
    monkeypatch.setattr(dbmod, "CONNECT_TIMEOUT_S", 0.5)
    db = Database.from_target(parse_database_url(silent_database))
    started = time.monotonic()
    with pytest.raises(TransientError):
        with db.session() as session:
            session.sql("SELECT 1")
    assert time.monotonic() - started < 10


def test_a_query_longer_than_the_connect_timeout_still_runs(pg_server, monkeypatch):
    monkeypatch.setattr(dbmod, "CONNECT_TIMEOUT_S", 0.3)
    db = Database.from_target(pg_server)
    try:
        with db.session() as session:
            assert session.sql("SELECT pg_sleep(0.8), 1 AS one")[0]["one"] == 1
    finally:
        db.close()


def _as_the_cloudsql_connector(host: str, port: int) -> _NativeOverDbApi:
    """A connection made as the Cloud SQL connector (1.23) makes one: a TCP connection and a TLS handshake with no
    timeout, then pg8000's DB-API connect over that socket, wrapped as ``cloudsql_connect_factory`` wraps it."""
    raw = socket.create_connection((host, port))
    tls = ssl.create_default_context()
    tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
    sock = tls.wrap_socket(raw, server_hostname=host)
    return _NativeOverDbApi(pg8000.dbapi.connect("zen", database="zen", sock=sock, timeout=30))


def test_a_cloudsql_connect_that_never_finishes_answers_and_gives_its_slot_back():
    """The instance's address accepts and never answers the TLS handshake: the request answers (transient, so the
    message is redelivered) within the pool's open limit, and the next request of the instance finds its slot free
    rather than waiting for one the hung connect held."""
    with silent_server() as (url, _):
        target = parse_database_url(url)
        db = Database(lambda: _as_the_cloudsql_connector(target.host or "", target.port), max_open=1)
        db.open_limit_s, db.open_wait_s = 0.5, 0.5
        raised: list[BaseException] = []

        def request() -> None:
            try:
                with db.transaction() as session:
                    session.sql("SELECT 1")
            except BaseException as exc:  # noqa: BLE001 - what the function would answer
                raised.append(exc)

        for _ in range(2):
            worker = threading.Thread(target=request, daemon=True)
            worker.start()
            worker.join(timeout=10)
            assert not worker.is_alive(), "the request still waits on a connect that never finishes"
        assert [type(exc) for exc in raised] == [TransientError, TransientError]
        assert all("cannot connect to Postgres" in str(exc) for exc in raised), raised
