"""Upgrades (``zen.store.migrate``): the functions refuse to work on a schema older than their code
(500 with the reason, so Pub/Sub redelivers; the tick does nothing, so no job is swept as silent
while its reports cannot be recorded), a migration waits a bounded time for its table locks, and a
new migration numbered below one applied is refused; a database migrated with an earlier text of a file
(``migrate.REWRITTEN``) is brought to today's, and no file changes after it is recorded."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from tests.messages import heartbeat, job_request
from tests.test_cli_and_store import _schema
from tests.test_functions_lifecycle import job
from zen.store import migrate as migrations
from zen.store.db import Database
from zen.store.migrate import MIGRATIONS_DIR, REWRITTEN, migrate, migration_files


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


def _refused_once_applied(empty_db, directory, name: str, sql: str, match: str) -> None:
    """``directory`` applied, then ``name`` written with ``sql``: the next ``zen db migrate`` refuses, saying ``match``."""
    owner = Database.from_target(empty_db)
    try:
        migrate(owner, directory)
        (directory / name).write_text(sql)
        with pytest.raises(RuntimeError, match=match):
            migrate(owner, directory)
    finally:
        owner.close()


def test_a_migration_numbered_below_an_applied_one_is_refused(empty_db, tmp_path):
    directory = _numbered(tmp_path, ("0001_a.sql", "CREATE TABLE a (x int);"), ("0003_c.sql", "CREATE TABLE c (x int);"))
    _refused_once_applied(empty_db, directory, "0002_b.sql", "CREATE TABLE b (x int);",
                          "0002_b.sql is numbered below 3, already applied")


def test_the_code_needs_the_newest_bundled_migration():
    assert migrations.latest_version() == max(int(p.name[:4]) for p in MIGRATIONS_DIR.glob("*.sql"))


_GANG_LEFT_0036 = (  # migration 0036 as first written: a gang's departed nodes (jobs.left_vms holds them today)
    "-- The VMs that left the current attempt's gang while it assembled (zen.core.gang.decide_given_back: given\n"
    "-- back, preempted, stopped), each with the seq of the report that said so: a copy of one of its earlier\n"
    "-- claims, delivered late or again (Pub/Sub is at-least-once and unordered), must not put it back in the gang,\n"
    "-- which would then be confirmed to a VM gone. Cleared with the gang at each new attempt.\n"
    "ALTER TABLE jobs ADD COLUMN gang_left jsonb;\n"
    "GRANT UPDATE (gang_left) ON jobs TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;\n")


def _released(tmp_path, name: str, text: str):
    """The migrations as a release had them: those before ``name``, and ``name`` with ``text``."""
    older = tmp_path / "older"
    older.mkdir()
    for version, _, path in migration_files():
        if version < int(name[:4]):
            shutil.copy(path, older)
    (older / name).write_text(text)
    return older


def _left_vms_grants(db) -> list[tuple]:
    with db.session() as session:
        rows = session.sql("SELECT grantee, privilege_type FROM information_schema.column_privileges "
                           "WHERE table_name = 'jobs' AND column_name = 'left_vms' ORDER BY 1, 2")
    return [tuple(r.values()) for r in rows]


def test_a_database_migrated_with_earlier_texts_is_brought_to_todays(empty_db, db, tmp_path):
    """A deployment migrated when 0035's comment read otherwise and 0036 added ``gang_left``: today's
    ``zen db migrate`` refused it ("changed after it was applied") and every function answered 500 on the
    schema it could not bring up to date. (0036's column is added beside gang_left, not renamed: the release that
    wrote it names it in each job's update until the new code is deployed.)"""
    older = _released(tmp_path, "0036_gang_left.sql", _GANG_LEFT_0036)
    assert hashlib.sha256(_GANG_LEFT_0036.encode()).hexdigest() in REWRITTEN[36]
    [first_0035] = REWRITTEN[35]
    deployed = Database.from_target(empty_db)
    try:
        migrate(deployed, older)
        with deployed.transaction() as session:  # 0035 with the comment it had then (the same SQL)
            session.sql("UPDATE schema_migrations SET checksum = :c WHERE version = 35", c=first_0035)
        applied = migrate(deployed)
        assert applied[:2] == ["0035_named_max_runtime.sql (recorded with an earlier text: comments only)",
                               "0036_left_vms.sql (recorded with an earlier text: its SQL brought up to date)"]
        assert applied[2:] == [path.name for version, _, path in migration_files() if version > 36]
        assert migrate(deployed) == []
        kept = [row for row in _schema(deployed) if "gang_left" not in row]  # kept for the release that writes it
        assert kept == _schema(db) and _left_vms_grants(deployed) == _left_vms_grants(db)
    finally:
        deployed.close()


_PROBE_VOUCHED_0041 = (  # migration 0041 as first written: probe_vouched_at alone (probe_prev_* came the same day)
    "-- How far the heartbeat path is known to deliver (zen.jobs.probes): the time the latest probe heard was sent (or\n"
    "-- one the tick could not publish, judged as if prompt). The lost-job sweep counts an attempt's silence up to\n"
    "-- then, not to now: a stall that began after the last probe came through (no tick has probed it yet), or a\n"
    "-- steady backlog of the heartbeat function, holds no silence that Zen could not have heard. Before, a probe\n"
    "-- heard late moved back_at, which held every silence for as long as the path stayed slow, a job on a dead VM\n"
    "-- with it; the heartbeat function no longer moves back_at (its grant goes a release later: the code before\n"
    "-- this one still sets it while an upgrade deploys).\n"
    "ALTER TABLE tick_clock ADD COLUMN probe_vouched_at timestamptz;\n"
    "UPDATE tick_clock SET probe_vouched_at = probe_sent_at WHERE probe_heard_at IS NOT NULL;\n"
    "GRANT UPDATE (probe_vouched_at) ON tick_clock TO zen_ticker, zen_heartbeat;\n")


def test_a_database_migrated_with_the_first_0041_is_brought_to_todays(empty_db, db, tmp_path):
    """0041 first added ``probe_vouched_at`` alone; a database migrated then was refused by today's ``zen db
    migrate`` ("changed after it was applied"), so 0042 on never came and every function answered 500."""
    older = _released(tmp_path, "0041_probe_vouched.sql", _PROBE_VOUCHED_0041)
    deployed = Database.from_target(empty_db)
    try:
        migrate(deployed, older)
        applied = migrate(deployed)
        assert hashlib.sha256(_PROBE_VOUCHED_0041.encode()).hexdigest() in REWRITTEN[41]
        assert applied[0] == "0041_probe_vouched.sql (recorded with an earlier text: its SQL brought up to date)"
        assert applied[1:] == [path.name for version, _, path in migration_files() if version > 41]
        assert _schema(deployed) == _schema(db)
        with deployed.session() as session:  # the functions' grants on the columns added
            rows = session.sql("SELECT grantee, column_name FROM information_schema.column_privileges WHERE "
                               "table_name = 'tick_clock' AND column_name LIKE 'probe_prev%' AND privilege_type = "
                               "'UPDATE' AND grantee LIKE 'zen%' ORDER BY 1, 2")
        assert [tuple(r.values()) for r in rows] == [(role, column) for role in ("zen_heartbeat", "zen_ticker")
                                                     for column in ("probe_prev_nonce", "probe_prev_sent_at")]
    finally:
        deployed.close()


def test_a_migration_changed_otherwise_after_it_was_applied_is_refused(empty_db, tmp_path):
    directory = _numbered(tmp_path, ("0001_a.sql", "CREATE TABLE a (x int);"))
    _refused_once_applied(empty_db, directory, "0001_a.sql", "CREATE TABLE a (x bigint);",
                          "0001_a.sql changed after it was applied .*add a new one")


def test_no_migration_changes_after_its_checksum_is_recorded():
    """A deployed database refuses a file changed after it applied it: migrations/checksums.txt keeps each
    file's checksum, so an edit fails here rather than at a user's upgrade."""
    recorded = dict(reversed(line.split()) for line in (MIGRATIONS_DIR / "checksums.txt").read_text().splitlines())
    now = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(MIGRATIONS_DIR.glob("*.sql"))}
    changed = sorted(name for name in now if name in recorded and recorded[name] != now[name])
    assert not changed, f"{changed} changed after release: put the file back and add a new migration"
    new = [f"{checksum}  {name}" for name, checksum in now.items() if name not in recorded]
    assert not new, "a new migration: add its line to migrations/checksums.txt: " + "; ".join(new)
    assert recorded.keys() <= now.keys(), "checksums.txt names a migration that is gone"
