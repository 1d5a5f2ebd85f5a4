"""Postgres access: where to connect (``zen.store.connect``: Cloud SQL with IAM authentication, else
``ZEN_DATABASE_URL``), a small connection pool, transactions and named queries. Errors are classified here, once, for every
caller (``_classified``): an infrastructure fault becomes ``TransientError`` (redelivered), an error
caused by a statement's data ``DataRejected`` (recorded and acked), anything else propagates.

The variables: docs/reference/configuration.md; which SQLSTATEs and driver errors go where, and when a
connection goes back to the pool: docs/reference/messages.md, "Rules".
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pg8000.native
from pg8000.exceptions import DatabaseError, InterfaceError

from zen.core.errors import ConfigError, DataRejected, TransientError
from zen.store.connect import ConnectionTarget as ConnectionTarget, bounded, cloudsql_connect_factory
from zen.store.lease import Lease, backend_holds
from zen.store.connect import OPEN_LIMIT_S, opened_within, positive_from_env, still_open
from zen.store.connect import parse_database_url as parse_database_url

QUERIES_FILE = Path(__file__).with_name("queries.sql")
# SQLSTATE classes a retry can fix: connection, resources, operator intervention (a shutdown), serialization, deadlocks,
# a transaction left idle past idle_in_transaction_session_timeout (its connection ended: zen.store.connect.bounded).
_TRANSIENT_SQLSTATE = re.compile(r"^(08|53|57|40001|40P01|25P03)")
# Data exceptions, integrity violations and program limits exceeded (54000: a value too large for a btree index row).
_DATA_SQLSTATE = re.compile(r"^(22|23|54)")

def load_queries(path: Path = QUERIES_FILE) -> dict[str, str]:
    """Split a ``-- name: X`` annotated SQL file into {name: sql}; a name given twice is refused (the
    second would silently replace the first for every caller)."""
    queries: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in path.read_text().splitlines():
        match = re.match(r"^--\s*name:\s*(\w+)\s*$", line)
        if match:
            if name:
                queries[name] = "\n".join(lines).strip().rstrip(";")
            name, lines = match.group(1), []
            if name in queries:
                raise ValueError(f"{path.name}: the query name {name!r} is given twice")
        elif name is not None:
            lines.append(line)
    if name:
        queries[name] = "\n".join(lines).strip().rstrip(";")
    return queries


@functools.cache
def _shipped_queries() -> dict[str, str]:
    return load_queries()


def _server_fields(exc: BaseException) -> dict[str, Any] | None:
    """The server's ErrorResponse fields (``C``: the SQLSTATE, ``M``: the message) of a driver error."""
    return exc.args[0] if isinstance(exc, DatabaseError) and exc.args and isinstance(exc.args[0], dict) else None


def sqlstate(exc: BaseException | None) -> str | None:
    """The SQLSTATE of a server error, raised by the driver or as ``_classified`` wrapped it."""
    return str(_server_error(exc).get("C", "")) or None


def server_message(exc: BaseException | None) -> str:  # the server's message of such an error ("" if none)
    return str(_server_error(exc).get("M", ""))


def _server_error(exc: BaseException | None) -> dict[str, Any]:  # the first error with fields, down its causes
    while exc is not None:
        if (fields := _server_fields(exc)) is not None:
            return fields
        exc = exc.__cause__
    return {}


def _classified(exc: Exception) -> tuple[Exception | None, bool]:
    """What the caller sees for an error the driver raised, and whether the connection is unusable.
    ``None``: raise ``exc`` itself (a server error that is neither transient nor about the data)."""
    fields = _server_fields(exc)
    if fields is not None:  # the server's ErrorResponse: the driver read up to ReadyForQuery
        code = str(fields.get("C", ""))
        if code == "0A000":
            # "cached plan must not change result type": a migration changed a table under this
            # connection's prepared statements. Drop the connection; the retry gets a fresh one.
            return TransientError(f"prepared statement outdated by a schema change: {fields.get('M')}"), True
        if _TRANSIENT_SQLSTATE.match(code):
            return TransientError(f"Postgres is unavailable: {fields.get('M', '')}"), True
        if _DATA_SQLSTATE.match(code):
            return DataRejected(f"the database refused the data ({code}): {fields.get('M', '')}"), False
        return None, False
    # Anything else stopped the driver between protocol messages: the connection is unusable.
    if isinstance(exc, (DatabaseError, InterfaceError, OSError)):
        return TransientError(f"Postgres is unavailable: {exc}"), True
    if isinstance(exc, (ValueError, OverflowError, TypeError, ArithmeticError)):  # UnicodeError is a ValueError
        return DataRejected(f"a value cannot be sent to the database ({type(exc).__name__}: {str(exc)[:300]})"), True
    return None, True


def _prepared(conn: Any, sql: str) -> Any:
    """``sql`` prepared once per connection (a server-side named statement): each later run is one round
    trip (bind, execute, sync) instead of three, and its ``:name`` placeholders parsed once a process. Prepared on
    the driver's connection: under the Cloud SQL connector's wrapper (``_conn``: ``zen.store.connect``) where so."""
    cache = getattr(conn, "_zen_prepared", None)
    if cache is None:
        cache = conn._zen_prepared = {}
    statement = cache.get(sql)
    if statement is None:
        statement = cache[sql] = _Statement(getattr(conn, "_conn", conn), sql)
    return statement


@functools.lru_cache(maxsize=4096)
def _parsed(sql: str) -> tuple[str, Any]:
    """pg8000's reading of ``sql``'s ``:name`` placeholders (its text with ``$n`` and the function that orders
    the values): pure, so one a process. pg8000 reads them character by character in Python for each
    connection that prepares the statement: 0.3-0.5 ms each of Zen's queries, some 15% of the CPU of a test
    module whose every test opens new connections (tests/test_functions_lifecycle.py)."""
    statement, make_vals = pg8000.native.to_statement(sql)
    return statement, make_vals


class _Statement(pg8000.native.PreparedStatement):  # type: ignore[misc]  # pg8000 has no types
    """pg8000's prepared statement (no declared types, as ``Connection.prepare`` makes it) with its placeholders
    read by ``_parsed``: what pg8000's own ``__init__`` does, less the reading."""

    def __init__(self, con: pg8000.native.Connection, sql: str):  # not super().__init__: it would read sql again
        self.con = con
        self.statement, self.make_vals = _parsed(sql)
        self.name_bin, self.cols, self.input_funcs = con.prepare_statement(self.statement, ())


class Session:
    """One connection inside ``Database.transaction()``: runs named queries, returns dict rows.
    ``poisoned``: the connection must not be reused (the driver raised anything but a server-reported
    error, so its protocol state is unknown, or the error was transient)."""

    def __init__(self, conn: pg8000.native.Connection, queries: dict[str, str]):
        self._conn = conn
        self._queries = queries
        self.poisoned = False

    def _call(self, sql: str, params: dict[str, Any]) -> tuple[list[list[Any]], list[dict[str, Any]] | None]:
        """Rows and columns; every driver error leaves here classified (see ``_classified``)."""
        try:
            if not params:  # simple query protocol: one round trip, scripts allowed
                rows = self._conn.run(sql)
                return rows, self._conn.columns
            statement = _prepared(self._conn, sql)
            rows = statement.run(**params)
            return rows, statement.columns
        except BaseException as exc:
            seen, unusable = _classified(exc) if isinstance(exc, Exception) else (None, True)
            self.poisoned = self.poisoned or unusable
            if seen is None:
                raise
            raise seen from exc

    def run(self, name: str, /, **params: Any) -> list[dict[str, Any]]:
        """Run the named query from queries.sql."""
        return self.sql(self._queries[name], **params)

    def sql(self, sql: str, /, **params: Any) -> list[dict[str, Any]]:
        """Run a literal, parameterised statement (migrations, tests)."""
        rows, columns = self._call(sql, params)
        if not rows or columns is None:
            return []
        names = [c["name"] for c in columns]
        return [dict(zip(names, row)) for row in rows]

    def one(self, name: str, /, **params: Any) -> dict[str, Any] | None:
        rows = self.run(name, **params)
        return rows[0] if rows else None

    def one_row(self, name: str, /, **params: Any) -> dict[str, Any]:
        """The row of a statement that always returns one (an aggregate, a lock, a count of deletes)."""
        if (row := self.one(name, **params)) is None:
            raise LookupError(f"the query {name!r} returned no row, and it always returns one")
        return row

    def execute(self, sql: str) -> None:
        """Run a script with no parameters (several statements allowed: migrations)."""
        self._call(sql, {})


class Database:
    """A thread-safe pool of pg8000 connections with transactional sessions.

    ``max_idle`` connections are kept open between uses: a function instance serves up to 4 requests
    at once (terraform's concurrency) and marks published outbox rows in the background (one more),
    so 5 keep every request from paying a new connection (several ms) under load.

    ``max_open`` bounds the connections open at once (in use and idle; ``None``: no bound), so that
    instances x this stays under the server's max_connections (terraform sets ``ZEN_DB_MAX_OPEN`` per
    function from what one request holds at once). A caller finding every connection in use waits at
    most ``open_wait_s``, then gets ``TransientError`` (the function answers 500 and Pub/Sub
    redelivers): never an unbounded wait.

    ``lock_hold_s`` (``ZEN_FUNCTION_TIMEOUT_S``: the function's timeout; ``None``: no bound) bounds a transaction
    and a session lock (``session_lock``) left idle by a request cut at its timeout (``zen.store.connect.bounded``).
    """

    open_wait_s = 10.0
    open_limit_s = OPEN_LIMIT_S  # the most one connect takes, whatever makes it (``zen.store.connect.opened_within``)

    def __init__(self, connect: Callable[[], pg8000.native.Connection], max_idle: int = 5,
                 max_open: int | None = None, query_timeout_s: float | None = None, lock_hold_s: float | None = None):
        self._connect, self.query_timeout_s, self.lock_hold_s = connect, query_timeout_s, lock_hold_s
        self._idle: list[pg8000.native.Connection] = []
        self._lock = threading.Lock()
        self._max_idle = max_idle
        self.max_open = max_open
        # A slot per connection handed out; an idle connection is one whose slot was given back, and a
        # new one is opened only when none is idle, so open connections never exceed the slots.
        self._slots = threading.BoundedSemaphore(max_open) if max_open is not None else None
        self.queries = _shipped_queries()  # one dict for every Database of the process (never changed)

    @classmethod
    def from_target(cls, target: ConnectionTarget, max_open: int | None = None,
                    query_timeout_s: float | None = None, lock_hold_s: float | None = None) -> "Database":
        return cls(target.connect, max_open=max_open, query_timeout_s=query_timeout_s, lock_hold_s=lock_hold_s)

    @classmethod
    def from_env(cls) -> "Database":
        max_open, query_timeout_s = positive_from_env("ZEN_DB_MAX_OPEN"), positive_from_env("ZEN_DB_QUERY_TIMEOUT_S")
        lock_hold_s = positive_from_env("ZEN_FUNCTION_TIMEOUT_S")
        instance = os.environ.get("ZEN_CLOUDSQL_INSTANCE")
        if instance:
            return cls(cloudsql_connect_factory(instance), max_open=max_open, query_timeout_s=query_timeout_s,
                       lock_hold_s=lock_hold_s)
        url = os.environ.get("ZEN_DATABASE_URL")
        if not url:
            raise ConfigError("no database: set ZEN_CLOUDSQL_INSTANCE (Cloud SQL) or ZEN_DATABASE_URL "
                              "(postgresql://...)")
        return cls.from_target(parse_database_url(url), max_open=max_open, query_timeout_s=query_timeout_s,
                               lock_hold_s=lock_hold_s)

    def _acquire(self) -> tuple[pg8000.native.Connection, bool]:
        """A connection, its slot taken, and whether it stood idle in the pool (where it may have died)."""
        if self._slots is not None and not self._slots.acquire(timeout=self.open_wait_s):
            raise TransientError(f"all {self.max_open} database connections of this process (ZEN_DB_MAX_OPEN) "
                                 f"stayed in use for {self.open_wait_s:g} s")
        try:
            while (conn := self._pooled()) is not None:
                if still_open(conn):
                    return conn, True
                with contextlib.suppress(Exception):  # Postgres ended it while it stood idle: another instead
                    conn.close()
            return self._open(), False
        except BaseException:
            self._give_back_slot()
            raise

    def _pooled(self) -> pg8000.native.Connection | None:
        with self._lock:
            return self._idle.pop() if self._idle else None

    def _open(self) -> pg8000.native.Connection:
        try:
            return bounded(opened_within(self._connect, self.open_limit_s), self.query_timeout_s, self.lock_hold_s)
        except Exception as exc:  # noqa: BLE001 - translated below
            if isinstance(_classified(exc)[0], TransientError):
                raise TransientError(f"cannot connect to Postgres: {exc}") from exc
            raise

    def _give_back_slot(self) -> None:
        if self._slots is not None:
            self._slots.release()

    def _release(self, conn: pg8000.native.Connection, broken: bool) -> None:
        try:
            if not broken:
                with self._lock:
                    if len(self._idle) < self._max_idle:
                        self._idle.append(conn)
                        return
            with contextlib.suppress(Exception):
                conn.close()
        finally:
            self._give_back_slot()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Session]:
        """BEGIN ... COMMIT, or ROLLBACK on any error; errors classified as the module docstring says."""
        conn, session = self._begun()
        clean = False  # True once the transaction ended with COMMIT or ROLLBACK on a sound connection
        try:
            yield session
            session.execute("COMMIT")
            clean = True
        except Exception as exc:
            if not session.poisoned:
                try:
                    session.execute("ROLLBACK")
                    clean = True
                except Exception as lost:  # noqa: BLE001 - the connection is gone: retry the message
                    raise TransientError(f"Postgres is unavailable: {lost}") from exc
            raise
        finally:
            # Anything else (KeyboardInterrupt, a worker abort) leaves the transaction open: never
            # hand such a connection to the next caller.
            self._release(conn, broken=not clean)

    def _begun(self) -> tuple[pg8000.native.Connection, Session]:
        """A connection with its transaction begun. One that stood idle in the pool and fails its BEGIN (the link to
        Postgres dropped with nothing sent, which ``still_open`` cannot see: nothing of the transaction was sent) is
        closed and a new one opened in its place, once: the caller's work failed for it, and a notifier that had
        POSTed a notice then failed to record its answer, and the event's redelivery POSTed it again."""
        conn, pooled = self._acquire()
        while True:
            session = Session(conn, self.queries)
            try:
                session.execute("BEGIN")
                return conn, session
            except TransientError:
                if not pooled:
                    self._release(conn, broken=True)
                    raise
            except BaseException:
                self._release(conn, broken=True)
                raise
            with contextlib.suppress(Exception):
                conn.close()
            try:
                conn, pooled = self._open(), False
            except BaseException:
                self._give_back_slot()
                raise

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A connection in autocommit mode (advisory locks held across transactions)."""
        conn, _ = self._acquire()
        session = Session(conn, self.queries)
        broken = True  # unless the block ends, normally or by an exception of its own
        try:
            yield session
            broken = False
        except Exception:
            broken = False
            raise
        finally:
            self._release(conn, broken or session.poisoned)

    @contextlib.contextmanager
    def session_lock(self, take: Callable[[Session], bool], give_back: Callable[[Session], None]) -> Iterator[Lease]:
        """A session-level advisory lock, held on one connection for the block: yields whether ``take``
        got it (a ``Lease``: its ``lost()`` tells a block that ran past the hold whether the lock went), and then
        ``give_back`` releases it (the tick's lock, a cluster's scaling lock).

        The connection stands idle while the block runs. With ``lock_hold_s``, Postgres ends it once idle that
        long (``idle_session_timeout``), and the lock with it: Cloud Functions answers 504 at the timeout and
        leaves the instance running, throttled, its thread standing still wherever it was, the connection open,
        so that every later tick or pass skipped for as long as the instance lived. Giving back a lock whose
        connection was lost (so, or otherwise) is no error: it went with the connection."""
        with self.session() as session:
            if not take(session):
                yield Lease(False)
                return
            limited = self.lock_hold_s is not None
            try:
                holds = None
                if limited:
                    backend = session.sql(
                        "SELECT set_config('idle_session_timeout', :ms, false), pg_backend_pid() AS pid, backend_start"
                        " FROM pg_stat_activity WHERE pid = pg_backend_pid()",
                        ms=str(max(1, int(float(self.lock_hold_s or 0) * 1000))))[0]
                    holds = functools.partial(backend_holds, self.session, backend["pid"], backend["backend_start"])
                yield Lease(True, holds)
            finally:
                try:
                    give_back(session)
                    if limited:
                        session.sql("SELECT set_config('idle_session_timeout', '0', false)")  # idle in the pool
                except TransientError:
                    if not session.poisoned:  # a connection lost is closed, and its locks go with it
                        raise

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.close()

