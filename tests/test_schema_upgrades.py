"""Upgrades (``zen.store.migrate``): the functions refuse to work on a schema older than their code
(500 with the reason, so Pub/Sub redelivers; the tick does nothing, so no job is swept as silent
while its reports cannot be recorded), a migration waits a bounded time for its table locks, and a
new migration numbered below one applied is refused."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from zen.store import migrate as migrations
from zen.store.db import Database
from zen.store.migrate import MIGRATIONS_DIR, migrate


def _behind(db) -> dict:
    """Make the schema look one migration older; returns the row to put back."""
    with db.transaction() as session:
        [row] = session.sql("DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM "
                            "schema_migrations) RETURNING version, name, checksum")
    return row


def _caught_up(db, row: dict) -> None:
    with db.transaction() as session:
        session.sql("INSERT INTO schema_migrations (version, name, checksum) VALUES (:version, :name, :checksum)",
                    **row)


def test_functions_answer_500_with_the_reason_on_an_older_schema_and_nothing_is_swept(functions, zen, db, clock,
                                                                                      caplog):
    functions.submit(job_request("run-1"))
    functions.heartbeat(heartbeat("run-1", "CLAIMED", 1))
    functions.heartbeat(heartbeat("run-1", "RUNNING", 2))
    functions.tick()
    clock.advance(60)
    functions.tick()  # the ticks' schedule, as the tick clock sees it

    row = _behind(db)  # new code deployed before `zen db migrate`: its instances start afresh
    zen._schema_ok = False
    answer = functions.send("on_job_submitted", job_request("new-1"))
    assert answer.status_code == 500 and "run `zen db migrate`" in caplog.text  # the function's log
    clock.advance(900)  # the operator migrates 15 minutes later
    assert functions.send("on_heartbeat", heartbeat("run-1", "SUCCEEDED", 3, exit_code=0)).status_code == 500
    assert functions.send("on_scale_tick", {"tick": True}).status_code == 500
    assert job(zen, "run-1").status.value == "RUNNING"

    _caught_up(db, row)
    functions.tick()  # the first tick after the gap: the job's silence counts from now
    assert job(zen, "run-1").status.value == "RUNNING" and job(zen, "run-1").attempt == 1
    functions.heartbeat(heartbeat("run-1", "SUCCEEDED", 3, exit_code=0))  # redelivered
    functions.submit(job_request("new-1"))
    assert job(zen, "run-1").status.value == "SUCCEEDED" and job(zen, "new-1") is not None


def _numbered(tmp_path, *files: tuple[str, str]):
    for name, sql in files:
        (tmp_path / name).write_text(sql)
    return tmp_path


def test_a_migration_waits_a_bounded_time_for_its_locks(empty_db, tmp_path, monkeypatch):
    monkeypatch.setattr(migrations, "LOCK_TIMEOUT_S", 1)
    monkeypatch.setattr(migrations, "LOCK_TRIES", 2)
    first = _numbered(tmp_path, ("0001_t.sql", "CREATE TABLE t (a int);"))
    owner, holder = Database.from_target(empty_db), Database.from_target(empty_db)
    try:
        migrate(owner, first)
        (tmp_path / "0002_b.sql").write_text("ALTER TABLE t ADD COLUMN b int;")
        with holder.transaction() as session:  # a long transaction reading t (an operator's psql)
            session.sql("SELECT * FROM t")
            with pytest.raises(RuntimeError, match="waited 1 s for a table lock 2 times"):
                migrate(owner, first, pause_s=0)
        assert migrate(owner, first) == ["0002_b.sql"]  # once it is gone
    finally:
        owner.close()
        holder.close()


def test_a_migration_numbered_below_an_applied_one_is_refused(empty_db, tmp_path):
    directory = _numbered(tmp_path, ("0001_a.sql", "CREATE TABLE a (x int);"), ("0003_c.sql", "CREATE TABLE c (x int);"))
    owner = Database.from_target(empty_db)
    try:
        migrate(owner, directory)
        (tmp_path / "0002_b.sql").write_text("CREATE TABLE b (x int);")
        with pytest.raises(RuntimeError, match="0002_b.sql is numbered below 3, already applied"):
            migrate(owner, directory)
    finally:
        owner.close()


def test_the_code_needs_the_newest_bundled_migration():
    assert migrations.latest_version() == max(int(p.name[:4]) for p in MIGRATIONS_DIR.glob("*.sql"))
