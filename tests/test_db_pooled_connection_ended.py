"""A connection Postgres ended while it stood idle in the pool (``pg_terminate_backend``, ``idle_session_timeout``,
the shutdown of a Cloud SQL maintenance or failover) is not handed out again (``zen.store.db.Database._acquire``,
``zen.store.connect.still_open``): a connection in autocommit mode (``Database.session``: a heartbeat's progress, a
batch of submissions, a scaling lock) has no BEGIN to fail first, and its first statement failed its request, every
job of a batch redelivered.
Postgres' own ending of the backends, on the embedded server; on the Cloud SQL connector's kind of connection too."""

from __future__ import annotations

import time

import pytest

from tests.test_cloudsql_connection_runs_statements import connectors_kind
from zen.store.db import Database


@pytest.fixture
def admin(pg_server):
    database = Database.from_target(pg_server)  # another database: not counted
    yield database
    database.close()


def ended(admin: Database, pid: int, timeout_s: float = 10.0) -> None:
    """Backend ``pid`` ended by Postgres, and gone from the server."""
    deadline = time.monotonic() + timeout_s
    with admin.session() as session:
        session.sql("SELECT pg_terminate_backend(:pid)", pid=pid)
        while session.sql("SELECT 1 AS x FROM pg_stat_activity WHERE pid = :pid", pid=pid):
            assert time.monotonic() < deadline, f"backend {pid} still runs"
            time.sleep(0.01)


def backend(db: Database) -> int:
    with db.session() as session:
        return int(session.sql("SELECT pg_backend_pid() AS pid")[0]["pid"])


def test_an_autocommit_use_gets_a_new_connection_for_one_postgres_ended_in_the_pool(db_target, admin):
    db = Database.from_target(db_target, max_open=1)
    try:
        pid = backend(db)
        ended(admin, pid)
        with db.session() as session:  # with max_open 1: the ended one's slot, not one more
            assert session.sql("SELECT pg_backend_pid() AS pid")[0]["pid"] != pid
        assert backend(db) != pid  # the new one went back to the pool, sound
    finally:
        db.close()


def test_a_connection_ended_by_idle_session_timeout_is_replaced(db_target, admin):
    db = Database.from_target(db_target, max_open=1)
    try:
        with db.session() as session:
            pid = session.sql("SELECT set_config('idle_session_timeout', '50', false), pg_backend_pid() AS pid")[0]["pid"]
        deadline = time.monotonic() + 10
        with admin.session() as session:  # Postgres ends it 50 ms on
            while session.sql("SELECT 1 AS x FROM pg_stat_activity WHERE pid = :pid", pid=pid):
                assert time.monotonic() < deadline, f"backend {pid} still runs"
                time.sleep(0.01)
        assert backend(db) != pid
    finally:
        db.close()


def test_the_connectors_kind_of_connection_ended_in_the_pool_is_replaced(db_target, admin):
    db = Database(connectors_kind(db_target), max_open=1, query_timeout_s=30, lock_hold_s=60)
    try:
        pid = backend(db)
        ended(admin, pid)
        assert backend(db) != pid
    finally:
        db.close()
