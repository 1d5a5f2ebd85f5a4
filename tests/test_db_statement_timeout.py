"""``ZEN_DB_QUERY_TIMEOUT_S`` bounds a statement on the server too (``statement_timeout``): with the client's socket
timeout alone, a statement waiting on a row lock kept running after its caller got TransientError, its backend
beside the connection the process opened next (more server connections than ZEN_DB_MAX_OPEN), and an autocommit
statement the caller was told failed (its message redelivered) was applied anyway."""

from __future__ import annotations

import time

import pytest

from zen.core.errors import TransientError
from zen.store.db import Database


def test_a_statement_given_up_on_ends_on_the_server_unapplied(db_target):
    holder = Database.from_target(db_target)
    bounded = Database.from_target(db_target, max_open=1, query_timeout_s=1)
    try:
        with holder.transaction() as s:
            s.sql("DROP TABLE IF EXISTS bounded_stmt")
            s.sql("CREATE TABLE bounded_stmt (id int PRIMARY KEY, v int NOT NULL)")
            s.sql("INSERT INTO bounded_stmt VALUES (1, 0)")
        with holder.transaction() as lock:
            lock.sql("SELECT v FROM bounded_stmt WHERE id = 1 FOR UPDATE")  # a row lock held by another request
            with pytest.raises(TransientError):
                with bounded.session() as s:  # autocommit, as record_progress / a group-commit insert
                    s.sql("UPDATE bounded_stmt SET v = v + 1 WHERE id = :id", id=1)
            with bounded.session() as s:  # the slot was given back: a second connection is opened
                mine = s.sql("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                             "AND query LIKE 'UPDATE bounded_stmt%'")[0]["n"]
        problems = [f"{mine} backend(s) still run the statement the caller was told failed"] if mine else []
        time.sleep(1.0)
        with holder.transaction() as s:
            v = s.sql("SELECT v FROM bounded_stmt WHERE id = 1")[0]["v"]
        if v:
            problems.append("the UPDATE the caller was told failed (TransientError: redelivered) was applied")
        assert not problems, problems
        with holder.transaction() as s:
            s.sql("DROP TABLE bounded_stmt")
    finally:
        bounded.close()
        holder.close()
