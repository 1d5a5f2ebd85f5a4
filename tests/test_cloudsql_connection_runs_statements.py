"""The Cloud SQL path (``ZEN_CLOUDSQL_INSTANCE``) runs Zen's statements: its connector hands over a pg8000 DB-API
connection, which ``zen.store.connect._NativeOverDbApi`` wraps, and a statement with parameters is prepared on the
connection under the wrapper (``zen.store.db._Statement``). Prepared on the wrapper itself, every such statement
raised ``AttributeError`` (the wrapper has no ``prepare_statement``): each delivery of every function answered 500,
redelivered until its dead letter, and no tick ran. Here the connector's own kind of connection, to the embedded
Postgres, as the connector makes it (``pg8000.dbapi.connect``), behind the pool with its bounds."""

from __future__ import annotations

from typing import Callable

import pg8000.dbapi

from zen.store.connect import SESSION, _NativeOverDbApi
from zen.store.db import Database


def connectors_kind(db_target) -> Callable[[], _NativeOverDbApi]:
    """Connections to ``db_target`` as the Cloud SQL connector makes them: ``pg8000.dbapi`` under Zen's wrapper."""
    def connect() -> _NativeOverDbApi:
        return _NativeOverDbApi(pg8000.dbapi.connect(user=db_target.user, password=db_target.password,
                                                     database=db_target.database, unix_sock=db_target.unix_sock,
                                                     host=db_target.host, port=db_target.port,
                                                     startup_params=SESSION))
    return connect


def test_statements_with_parameters_run_on_the_connectors_kind_of_connection(db_target):
    database = Database(connectors_kind(db_target), max_open=2, query_timeout_s=30, lock_hold_s=60)
    try:
        with database.transaction() as session:
            session.sql("CREATE TEMP TABLE seen (n int, label text) ON COMMIT DROP")
            session.sql("INSERT INTO seen VALUES (:n, :label)", n=41, label="x:y")
            rows = session.sql("SELECT n + 1 AS next, label FROM seen WHERE n = :n", n=41)
            again = session.sql("SELECT n + 1 AS next, label FROM seen WHERE n = :n", n=41)  # prepared once
        with database.transaction() as session:  # the connection back from the pool, its statements kept
            job = session.one("get_job", job_id="nobody")  # a named query, as every function runs them
    finally:
        database.close()
    assert rows == [{"next": 42, "label": "x:y"}] and again == rows
    assert job is None
