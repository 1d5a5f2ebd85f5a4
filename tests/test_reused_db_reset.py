"""The per-worker test database (tests.reused_db) is, after each test's reset, what the migrations made it:
every table's rows gone but the ones the migrations seeded (the migrations' record, the price refresh's
row), and those as seeded, however a test changed or deleted them; twice in a row (the second reset runs
the seeded tables' inserts the first prepared)."""

from __future__ import annotations

import os

from tests.reused_db import ReusedDatabase


def contents(database: ReusedDatabase) -> dict[str, list[str]]:
    keeper = database.keeper
    assert keeper is not None
    return {table: sorted(map(repr, keeper.run(f"SELECT * FROM {table}"))) for table in database.tables}


def test_reset_empties_what_a_test_wrote_and_restores_what_the_migrations_seeded(pg_server, template_db):
    database = ReusedDatabase(pg_server, template_db, f"reset_{os.getpid()}")
    try:
        made = contents(database)
        assert len(database.seeded) >= 2 and sum(len(rows) for rows in made.values()) > 50, made
        for round_ in range(2):
            keeper = database.keeper
            assert keeper is not None
            keeper.run("INSERT INTO early_stops (job_id, reason, requested_at) VALUES (:j, 'stop', now())",
                       j=f"job-{round_}")
            for table in database.seeded:
                keeper.run(f"DELETE FROM {table} WHERE ctid IN (SELECT ctid FROM {table} LIMIT 1)")
            assert contents(database) != made
            database.reset()
            assert contents(database) == made
    finally:
        database.drop()
