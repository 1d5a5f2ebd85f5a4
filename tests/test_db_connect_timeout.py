"""A database that never answers (a proxy or load balancer whose backend is gone) is given up on after
``CONNECT_TIMEOUT_S``: pg8000 had no timeout, and every command waited for ever, `zen stop` of a runaway job too
(and a function until Cloud Functions' own timeout). Once connected, a query waits as long as it runs."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from zen.core.errors import TransientError
from zen.store import db as dbmod
from zen.store.db import Database, parse_database_url


@pytest.fixture
def silent_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    server.close()


def test_a_database_that_never_answers_is_given_up_on(silent_port, monkeypatch):
    monkeypatch.setattr(dbmod, "CONNECT_TIMEOUT_S", 0.5)
    db = Database.from_target(parse_database_url(f"postgresql://zen:secret@127.0.0.1:{silent_port}/zen"))
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
