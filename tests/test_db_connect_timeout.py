"""A database that never answers (a proxy or load balancer whose backend is gone) is given up on after
``CONNECT_TIMEOUT_S``: pg8000 had no timeout, and every command waited for ever, `zen stop` of a runaway job too
(and a function until Cloud Functions' own timeout). Once connected, a query waits as long as it runs."""

from __future__ import annotations

import time

import pytest

from tests.test_cli_deployed_messages import silent_database  # noqa: F401 - fixture
from zen.core.errors import TransientError
from zen.store import connect as dbmod
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
