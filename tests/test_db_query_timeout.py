"""A Postgres that stops answering on a connection already made (a partition, a frozen host: no reset; here its
backend stopped with SIGSTOP) is given up on after ``ZEN_DB_QUERY_TIMEOUT_S`` (terraform sets it per function, under
its timeout): a query waited for ever, past its function's timeout, holding its pool slot, so that with
``ZEN_DB_MAX_OPEN`` every later request of the instance failed too. The wait raises ``TransientError`` (the message is
redelivered), the connection is dropped and the slot given back: the next request connects again."""

from __future__ import annotations

import os
import signal
import time

import pytest

from zen.core.errors import TransientError
from zen.store.db import Database, parse_database_url


def test_a_query_to_a_postgres_that_stopped_answering_gives_its_slot_back(db_target):
    db = Database.from_target(db_target, max_open=1, query_timeout_s=2)
    try:
        with db.session() as session:  # the one connection, kept idle
            pid = session.sql("SELECT pg_backend_pid() AS pid")[0]["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            began = time.monotonic()
            with pytest.raises(TransientError):  # (a transaction's BEGIN on it would be given up on, and the
                with db.session() as session:  # transaction begun on a new connection: Database._begun)
                    session.sql("SELECT 1")
            assert time.monotonic() - began < 10
            with db.transaction() as session:  # the slot is back: a new connection, another backend
                assert session.sql("SELECT 1 AS one")[0]["one"] == 1
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        db.close()


def test_the_bound_is_read_from_the_environment(db_url, monkeypatch):
    monkeypatch.delenv("ZEN_CLOUDSQL_INSTANCE", raising=False)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.setenv("ZEN_DB_QUERY_TIMEOUT_S", "1")
    db = Database.from_env()
    try:
        with db.session() as session:  # a query that outlasts the bound is given up on
            with pytest.raises(TransientError):
                session.sql("SELECT pg_sleep(3)")
    finally:
        db.close()
    monkeypatch.setenv("ZEN_DB_QUERY_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="ZEN_DB_QUERY_TIMEOUT_S must be a positive integer"):
        Database.from_env()
    assert parse_database_url(db_url).database
