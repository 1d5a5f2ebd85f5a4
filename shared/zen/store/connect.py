"""Where Postgres is and how a connection to it is made: Cloud SQL through its connector with IAM authentication
(``ZEN_CLOUDSQL_INSTANCE``), else ``ZEN_DATABASE_URL`` (TCP or a unix socket); every session in UTC, a connect bounded
by ``CONNECT_TIMEOUT_S``, an answer by ``ZEN_DB_QUERY_TIMEOUT_S`` where set. The pool over them: ``zen.store.db``.
"""

from __future__ import annotations

import functools
import os
import select
import threading
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import parse_qs, quote, unquote, urlparse

import pg8000.native

from zen.core.errors import ConfigError
from zen.store.cloudsql_errors import connector_error

# Every session's times in UTC, Cloud SQL's default (a Postgres set to another zone, as the embedded one may be).
SESSION = {"TimeZone": "UTC"}
CONNECT_TIMEOUT_S = 10.0  # a connection and Postgres' startup answer; a port that never answered held every command
# A whole connect, whatever makes it (``opened_within``): the Cloud SQL connector's first one of an instance also fetches
# its certificate and the instance's addresses from the Admin API (a second or two), under every function's timeout.
OPEN_LIMIT_S = 20.0


@dataclass(frozen=True)
class ConnectionTarget:
    """Where pg8000 connects: a TCP host/port or a unix socket."""

    user: str
    database: str
    password: str | None = None
    host: str | None = None
    port: int = 5432
    unix_sock: str | None = None

    def connect(self) -> pg8000.native.Connection:
        # No TLS on a local socket (Postgres offers none there): pg8000 would build a TLS context (~16 ms of CPU)
        # for every connection only to be told no.
        where = {"unix_sock": self.unix_sock, "ssl_context": False} if self.unix_sock else {"host": self.host, "port": self.port}
        conn = pg8000.native.Connection(user=self.user, password=self.password, database=self.database,
                                        startup_params=SESSION, timeout=CONNECT_TIMEOUT_S, **where)
        conn._usock.settimeout(None)  # connected: a query waits as long as it runs (pg8000's socket, TLS or not)
        return conn

    def with_database(self, database: str) -> "ConnectionTarget":
        return ConnectionTarget(self.user, database, self.password, self.host, self.port, self.unix_sock)

    def url(self) -> str:
        """This target as the ``postgresql://`` URL ``parse_database_url`` reads back."""
        auth = quote(self.user, safe="") + (f":{quote(self.password, safe='')}" if self.password else "")
        if self.unix_sock:
            socket_dir, _, name = self.unix_sock.rpartition("/")
            port = name.rsplit(".", 1)[-1]
            return f"postgresql://{auth}@/{quote(self.database, safe='')}?host={quote(socket_dir, safe='/')}" + (
                f"&port={port}" if port != "5432" else "")
        return f"postgresql://{auth}@{self.host}:{self.port}/{quote(self.database, safe='')}"


def parse_database_url(url: str) -> ConnectionTarget:
    """Parse a ``postgresql://`` URL (TCP, or unix socket via ``?host=/dir``) once, for both forms."""
    try:  # urllib's errors (a port that is no number, an unclosed [IPv6] host) name no variable
        parsed = urlparse(url)
        query = parse_qs(parsed.query)
        port = parsed.port or int(query.get("port", ["5432"])[0])
    except ValueError as exc:
        raise ValueError(f"ZEN_DATABASE_URL cannot be read ({exc}); its form is postgresql://USER:PASSWORD@HOST:PORT/DATABASE") from None
    if parsed.scheme not in ("postgresql", "postgres"):
        shown = url.replace(f":{parsed.password}@", ":***@") if parsed.password else url  # as written, password masked
        raise ValueError(f"ZEN_DATABASE_URL must start with postgresql://, got {shown!r}")
    database = unquote(parsed.path.lstrip("/")) or "postgres"
    user, password = unquote(parsed.username or "postgres"), unquote(parsed.password) if parsed.password else None
    socket_dir = query.get("host", [None])[0]
    if socket_dir and socket_dir.startswith("/"):
        return ConnectionTarget(user, database, password, unix_sock=f"{socket_dir}/.s.PGSQL.{port}")
    return ConnectionTarget(user, database, password, host=parsed.hostname or socket_dir or "localhost", port=port)


class _NativeOverDbApi:
    """The connector returns a DB-API pg8000 connection; give it what ``Session`` uses of the native
    API: ``run`` for parameterless scripts and ``columns``. A statement with parameters is prepared and run on the
    DB-API connection itself (``_conn``: ``zen.store.db._prepared``), which has what pg8000's prepared statements
    use; prepared on this wrapper, every one raised ``AttributeError`` on Cloud SQL, and every function answered
    500 (tests/test_cloudsql_connection_runs_statements.py)."""

    def __init__(self, conn: Any):
        self._conn = conn
        self._conn.autocommit = True  # transactions are explicit BEGIN/COMMIT, as with native
        self.columns: list[dict[str, Any]] | None = None

    def run(self, sql: str) -> list[list[Any]]:
        context = self._conn.execute_simple(sql)
        self.columns = context.columns
        return context.rows or []

    def close(self) -> None:
        self._conn.close()


def cloudsql_connect_factory(instance: str) -> Callable[[], Any]:
    """Connections to Cloud SQL ``instance`` through the connector (IAM authentication, ``ZEN_CLOUDSQL_IP_TYPE``).
    What the connector raises as it refreshes its token and the instance's data is read by
    ``zen.store.cloudsql_errors``: an outage ``TransientError``, a setting to fix ``ConfigError``."""
    from google.cloud.sql.connector import Connector, IPTypes

    named, user = os.environ.get("ZEN_CLOUDSQL_IP_TYPE", "PRIVATE").upper(), os.environ.get("ZEN_DB_USER")
    if not user or named not in IPTypes.__members__:  # a function that cannot start says which variable to fix
        raise ConfigError("ZEN_DB_USER is not set (ZEN_CLOUDSQL_INSTANCE needs it)" if not user else
                          f"ZEN_CLOUDSQL_IP_TYPE {named!r}: not one of {', '.join(IPTypes.__members__)}")
    connector, ip_type, database = Connector(refresh_strategy="lazy"), IPTypes[named], os.environ.get("ZEN_DB_NAME", "zen")
    return functools.partial(cloudsql_connect, connector, instance, user, database, ip_type)


def cloudsql_connect(connector: Any, instance: str, user: str, database: str, ip_type: Any) -> _NativeOverDbApi:
    """One connection to ``instance`` through ``connector``; its failures to refresh read by ``connector_error``."""
    try:
        return _NativeOverDbApi(connector.connect(instance, "pg8000", user=user, db=database, enable_iam_auth=True,
                                                  ip_type=ip_type, startup_params=SESSION))
    except Exception as exc:  # noqa: BLE001 - the connector's own failures, read once (zen.store.cloudsql_errors)
        if (seen := connector_error(exc, instance)) is None:
            raise
        raise seen from exc


def opened_within(connect: Callable[[], Any], limit_s: float) -> Any:
    """``connect()``, waited for ``limit_s`` at most: past it, ``TimeoutError`` (an ``OSError``: transient, the message
    redelivered), and the connection, should it come later, closed. The Cloud SQL connector (1.23) opens its TCP
    connection to the instance and makes its TLS handshake with no timeout, on its own event loop, and waits for its
    connect with none: an address that stopped answering (a failover, a network path down) held the request until
    Cloud Functions cut it at its timeout (504, redelivered all the same), and its pool slot for as long as the
    operating system kept trying (minutes; for ever for a handshake never answered), while every later request of
    the instance waited for a slot and failed. The connect goes on in its thread; the request answers."""
    arrived: list[Any] = []
    failed: list[BaseException] = []
    done, guard = threading.Event(), threading.Lock()
    abandoned = False

    def run() -> None:
        try:
            conn = connect()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            failed.append(exc)
            done.set()
            return
        with guard:
            if not abandoned:
                arrived.append(conn)
                done.set()
                return
        try:  # nobody waits for it any more
            conn.close()
        except Exception:  # noqa: BLE001 - a late connection's close is no one's error
            pass

    threading.Thread(target=run, name="zen-db-connect", daemon=True).start()
    done.wait(limit_s)
    with guard:
        if arrived:
            return arrived[0]
        if failed:
            raise failed[0]
        abandoned = True
    raise TimeoutError(f"no database connection after {limit_s:g} s")


def still_open(conn: Any) -> bool:
    """Whether a connection that stood idle in the pool has heard nothing since its last answer, asked of its socket
    without a round trip. Postgres writes to an idle connection only as it ends it (``pg_terminate_backend``,
    ``idle_session_timeout``, the shutdown of a Cloud SQL maintenance or failover: a FATAL error, then the close): one
    with anything to read is ended, and its first statement would fail its request (``zen.store.db.Database._acquire``).
    A link dropped with nothing sent is not seen here: its first statement fails."""
    sock = getattr(getattr(conn, "_conn", conn), "_usock", None)
    if sock is None:
        return True
    try:
        poller = select.poll()  # (no file descriptor of its own, as an epoll selector has: one syscall a checkout)
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):  # closed already (no file descriptor)
        return False


def positive_from_env(name: str) -> int | None:
    """``ZEN_DB_MAX_OPEN``: connections one process may hold open at once; ``ZEN_DB_QUERY_TIMEOUT_S``: the most a
    connection waits on Postgres for one answer; ``ZEN_FUNCTION_TIMEOUT_S``: the function's timeout, the longest a
    session lock is held (``Database.session_lock``) and a tick runs (unset or empty: no bound)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}")
    return int(raw)


def bounded(conn: Any, timeout_s: float | None, idle_s: float | None = None) -> Any:
    """``conn`` whose statements Postgres cancels after ``timeout_s`` less a second (``statement_timeout``, at least
    half a second: a statement waiting on a lock ends on the server too, not applied, SQLSTATE 57014, transient), and
    whose waits for an answer end after ``timeout_s`` (pg8000's socket, TLS or not, under the Cloud SQL connector's
    DB-API connection too): a server that stops answering (a partition, a frozen host: no reset) raises then, the
    connection is dropped and its pool slot given back, where a request waited past its function's timeout holding
    the slot, and every later request of the instance waited for it in vain. A frozen server's process may outlive
    the connection; one that answers cancels its statement itself.

    With ``idle_s`` (the function's timeout), Postgres ends a transaction left idle that long, and its connection
    (``idle_in_transaction_session_timeout``): rolled back whole, its row and advisory locks let go. Cloud Functions
    answers 504 at the timeout and leaves the instance running, throttled, its thread standing still wherever it
    was: inside a transaction, it held the rows it had locked (the tick clock's, a job's, a queue's lock) for as
    long as the instance lived, and every tick, heartbeat or admission reaching for them waited its whole
    ``statement_timeout`` and failed."""
    if idle_s is not None:
        conn.run(f"SET idle_in_transaction_session_timeout = {max(1, int(idle_s * 1000))}")
    if timeout_s is not None:
        conn.run(f"SET statement_timeout = {max(500, int(timeout_s * 1000) - 1000)}")
        getattr(conn, "_conn", conn)._usock.settimeout(timeout_s)
    return conn
