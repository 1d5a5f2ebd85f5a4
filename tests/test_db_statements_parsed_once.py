"""A statement's ``:name`` placeholders are read once a process (``zen.store.db._parsed``), not once for each
connection that prepares it, and a statement prepared so runs as pg8000's own does: against the real
Postgres, on two connections of their own, with values of several types and a ``::`` cast beside a
placeholder."""

from __future__ import annotations

from zen.store import db as dbmod
from zen.store.db import Database

SQL = "SELECT :n::int + 1 AS next, :label AS label, CAST(:when AS text)::date AS day, 'a:b' AS literal"


def test_two_connections_prepare_one_statement_read_once_and_answer_alike(db_target):
    first, second = Database.from_target(db_target, max_open=1), Database.from_target(db_target, max_open=1)
    try:
        before = dbmod._parsed.cache_info()
        with first.session() as session:
            a = session.sql(SQL, n=41, label="x:y", when="2026-12-06")
        with second.session() as session:  # another connection: prepared anew on the server, not read anew
            b = session.sql(SQL, n=1, label="z", when="2026-01-02")
        after = dbmod._parsed.cache_info()
    finally:
        first.close()
        second.close()
    assert str(a[0]["day"]) == "2026-12-06" and a[0]["next"] == 42 and a[0]["label"] == "x:y"
    assert b[0]["next"] == 2 and b[0]["literal"] == "a:b"
    assert after.misses - before.misses <= 1 and after.hits - before.hits >= 1
