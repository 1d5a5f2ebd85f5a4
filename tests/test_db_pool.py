"""The connection pool's bound (zen.store.db.Database ``max_open``, ZEN_DB_MAX_OPEN): a function instance
never holds more than its share of Cloud SQL's max_connections, however many requests and threads it
runs, and a caller that finds every connection in use waits a bounded time, then gets TransientError
(the function answers 500 and Pub/Sub redelivers) instead of waiting for ever or going past the bound.
Counted by the server itself (pg_stat_activity)."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid

import pytest

from zen.core.errors import ConfigError, TransientError
from zen.store.db import Database, sqlstate


def connections_to(admin: Database, database: str) -> int:
    with admin.session() as session:
        # Client backends only: an autovacuum worker on the database shows in pg_stat_activity too.
        return session.sql("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = :d "
                           "AND backend_type = 'client backend'", d=database)[0]["n"]


def busiest(db: Database, admin: Database, database: str, threads: int = 12, rounds: int = 4) -> int:
    """Run ``threads`` threads of ``rounds`` short transactions each; the most connections the server
    saw open to ``database`` meanwhile."""
    errors: list[BaseException] = []
    done = threading.Event()
    peak = [0]

    def work():
        try:
            for _ in range(rounds):
                with db.transaction() as session:
                    session.sql("SELECT pg_sleep(0.05)")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], connections_to(admin, database))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    done.set()
    watcher.join()
    assert not errors, errors
    return peak[0]


@pytest.fixture
def admin(pg_server):
    database = Database.from_target(pg_server)  # another database: not counted
    yield database
    database.close()


def settled(admin: Database, database: str, at_most: int, timeout_s: float = 10.0) -> int:
    """The connections open to ``database`` once closed ones are gone (a backend exits a moment after
    its client closed it) or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while (count := connections_to(admin, database)) > at_most and time.monotonic() < deadline:
        time.sleep(0.05)
    return count


def test_an_instance_never_opens_more_than_max_open_connections(db_target, admin):
    others = connections_to(admin, db_target.database)  # the test's own fixtures, if any
    unbounded = Database.from_target(db_target)
    try:
        assert busiest(unbounded, admin, db_target.database) - others > 3  # the load does open more, unbounded
    finally:
        unbounded.close()
    others = settled(admin, db_target.database, others)
    bounded = Database.from_target(db_target, max_open=3)
    try:
        peak = busiest(bounded, admin, db_target.database) - others
        assert 1 <= peak <= 3
        # Idle connections count too: what stays open after the burst is within the bound.
        assert connections_to(admin, db_target.database) - others <= 3
    finally:
        bounded.close()


def test_a_caller_finding_every_connection_in_use_waits_a_bounded_time_then_gets_a_transient_error(db_target):
    db = Database.from_target(db_target, max_open=2)
    db.open_wait_s = 0.3
    holding, release = threading.Barrier(3), threading.Event()

    def hold():
        with db.session():
            holding.wait()
            release.wait(timeout=30)

    holders = [threading.Thread(target=hold) for _ in range(2)]
    for holder in holders:
        holder.start()
    holding.wait()
    try:
        began = time.monotonic()
        with pytest.raises(TransientError, match="ZEN_DB_MAX_OPEN"):
            with db.transaction():
                pass
        assert 0.3 <= time.monotonic() - began < 3
    finally:
        release.set()
        for holder in holders:
            holder.join()
    # The slots came back with the connections: the next caller proceeds at once.
    with db.transaction() as session:
        assert session.sql("SELECT 1 AS one") == [{"one": 1}]
    db.close()


def test_a_failed_connect_gives_its_slot_back():
    def refuse():
        raise ConnectionRefusedError("no server")

    db = Database(refuse, max_open=1)
    db.open_wait_s = 0.2
    for _ in range(3):  # a leaked slot would make the second attempt time out instead
        with pytest.raises(TransientError, match="cannot connect"):
            with db.session():
                pass


def test_the_bound_comes_from_zen_db_max_open(db_url, monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.delenv("ZEN_CLOUDSQL_INSTANCE", raising=False)
    monkeypatch.setenv("ZEN_DB_MAX_OPEN", "9")
    assert Database.from_env().max_open == 9
    monkeypatch.delenv("ZEN_DB_MAX_OPEN")
    assert Database.from_env().max_open is None  # unset: no bound, as before
    for bad in ("0", "-1", "many"):
        monkeypatch.setenv("ZEN_DB_MAX_OPEN", bad)
        with pytest.raises(ValueError, match="ZEN_DB_MAX_OPEN"):
            Database.from_env()


def test_without_a_database_variable_from_env_names_both_and_starts_nothing(no_database):
    """Deployed code never starts a database: the embedded Postgres is the local stack's to start."""
    with pytest.raises(ConfigError, match="ZEN_CLOUDSQL_INSTANCE.*ZEN_DATABASE_URL"):
        Database.from_env()
    assert not (no_database / ".zen").exists()


def test_a_pooled_connection_postgres_ended_meanwhile_is_replaced_at_its_begin(db_target, admin):
    """Postgres restarted (or failed over, or the link dropped) while a connection stood idle in the pool: the next
    transaction begins on a new connection instead, in the same slot (one open at most), rather than failing its
    request (``Database._acquire`` sees it ended; ``Database._begun`` when only its BEGIN fails)."""
    db = Database.from_target(db_target, max_open=1)
    try:
        with db.transaction() as session:
            pid = session.sql("SELECT pg_backend_pid() AS pid")[0]["pid"]
        with admin.session() as session:
            session.sql("SELECT pg_terminate_backend(:pid)", pid=pid)
            while session.sql("SELECT 1 AS x FROM pg_stat_activity WHERE pid = :pid", pid=pid):
                pass  # gone
        with db.transaction() as session:
            assert session.sql("SELECT pg_backend_pid() AS pid")[0]["pid"] != pid
        with db.session() as session:  # the new one went back to the pool, sound
            session.sql("SELECT 1")
    finally:
        db.close()


def test_a_connect_postgres_refuses_for_too_many_connections_is_a_transient_error(db_target, admin):
    """Past max_connections (a burst over max_instances, a deploy's old instances finishing their requests) Postgres
    refuses the connect with SQLSTATE 53300 ("too many connections", "remaining connection slots are reserved"): the
    request fails with TransientError (500: Pub/Sub redelivers), its slot given back; no job fails for it. Here a
    role's connection limit, which Postgres refuses with the same SQLSTATE."""
    role = f"zen_limited_{uuid.uuid4().hex[:8]}"
    with admin.session() as session:
        session.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")
    db = Database.from_target(dataclasses.replace(db_target, user=role, password=None), max_open=2)
    db.open_wait_s = 0.5
    try:
        with db.transaction():
            with pytest.raises(TransientError) as refused:
                with db.transaction():
                    pass
            # The server's refusal read, or (on a loaded machine) the connection it closed seen first: a network error.
            assert sqlstate(refused.value) in ("53300", None)
            with admin.session() as session:
                session.execute(f"ALTER ROLE {role} CONNECTION LIMIT 2")
            with db.transaction() as session:  # the refused connect's slot was given back: the second opens
                session.sql("SELECT 1")
    finally:
        db.close()
        with admin.session() as session:
            deadline = time.monotonic() + 10
            while session.sql("SELECT 1 AS x FROM pg_stat_activity WHERE usename = :r", r=role):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            session.execute(f"DROP ROLE {role}")
