"""The embedded Postgres (``pgserver``, a local-only package) for ``zen local up``, the demo and
development: started on demand under ``<home>/pgdata``, stopped explicitly."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pg8000.native

from zen.store.db import ConnectionTarget, parse_database_url


EMBEDDED_DATABASE = "zen"
START_TRIES = 3  # starts of the embedded Postgres when a signal ends pg_ctl (start_server)


def embedded_server_url(home: str | os.PathLike | None = None) -> str:
    """Start (or reuse) the embedded Postgres under ``<home>/pgdata`` (home: ``$ZEN_HOME`` or
    ``.zen``) and return the URL of its ``postgres`` database. It keeps running for later commands."""
    data_dir = Path(home or os.environ.get("ZEN_HOME", ".zen")) / "pgdata"
    data_dir.mkdir(parents=True, exist_ok=True)
    return server_url(start_server(data_dir, cleanup_mode=None))


def server_url(server) -> str:
    """The URL of a pgserver handle's ``postgres`` database, its socket's folder escaped (pgserver's own
    ``get_uri`` puts it in unescaped: a clone under ``c++``, ``R&D`` or ``proj#2`` was read back as another)."""
    info = server.get_postmaster_info()
    if info.socket_dir is None:
        return server.get_uri()
    return ConnectionTarget("postgres", "postgres", unix_sock=f"{info.socket_dir}/.s.PGSQL.{info.port or 5432}").url()


def start_server(data_dir: str | os.PathLike, cleanup_mode: str | None):
    """pgserver's handle on the Postgres under ``data_dir`` (an existing directory), started if it is not
    running; ``cleanup_mode`` as ``pgserver.get_server`` takes it ("stop": when this process exits).

    A start whose ``pg_ctl`` a signal ended before it wrote a line (seen in test runs: a segmentation
    fault, a bus error, and no server) is tried again, up to ``START_TRIES`` in all; any other failure is
    raised."""
    data_dir = Path(data_dir).resolve()
    pgserver = _pgserver()
    for tries_left in range(START_TRIES - 1, -1, -1):
        try:
            return pgserver.get_server(str(data_dir), cleanup_mode=cleanup_mode)
        except (subprocess.CalledProcessError, FileNotFoundError) as failed:
            _forget_handle(data_dir)  # pgserver keeps the handle of a start that failed: the next one starts anew
            if not tries_left or not _killed_by_signal(failed):
                raise
    raise AssertionError("unreachable")


def _killed_by_signal(error: BaseException) -> bool:
    """Whether ``error`` is, or was raised while handling (pgserver then reads a log that was never
    written), a command that a signal ended (a negative return code)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, subprocess.CalledProcessError) and seen.returncode < 0:
            return True
        seen = seen.__context__
    return False


def _forget_handle(data_dir: Path) -> None:
    """Drop this process's pgserver handle on ``data_dir`` (and its exit hook, which would look for the
    handle), so that the next ``get_server`` starts or finds the server again."""
    import atexit

    try:
        handle = _pgserver().PostgresServer._instances.pop(data_dir, None)
    except ImportError:
        handle = None
    if handle is not None:
        atexit.unregister(handle._cleanup)


def _pgserver():
    """The local-only ``pgserver`` package (never deployed with the functions)."""
    import warnings

    with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR on headless machines
        warnings.simplefilter("ignore")
        import pgserver
    return pgserver


def stop_embedded_server(home: str | os.PathLike | None = None, timeout_s: float = 30.0) -> bool:
    """Stop the embedded Postgres under ``<home>/pgdata`` if one runs there; True when it was.

    Sends the postmaster SIGINT (Postgres' "fast shutdown") and waits for it to go: pgserver's own
    cleanup only stops a server from the last process holding a handle, which a CLI cannot know.
    """
    import signal
    import time

    data_dir = (Path(home or os.environ.get("ZEN_HOME", ".zen")) / "pgdata").resolve()
    pid_file = data_dir / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, signal.SIGINT)
    except (FileNotFoundError, IndexError, ValueError, ProcessLookupError):
        return False
    deadline = time.monotonic() + timeout_s
    while pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    _forget_handle(data_dir)  # so that a later call starts it again
    return not pid_file.exists()


def embedded_database_url(home: str | os.PathLike | None = None, *, fresh: bool = False,
                          database: str = EMBEDDED_DATABASE) -> str:
    """URL of the embedded server's ``zen`` database, created if missing (recreated if ``fresh``).
    Creating is not migrating: run ``zen db migrate``."""
    target = parse_database_url(embedded_server_url(home))
    admin = pg8000.native.Connection(user=target.user, unix_sock=target.unix_sock, database="postgres")
    try:
        exists = admin.run("SELECT 1 FROM pg_database WHERE datname = :d", d=database)
        if exists and fresh:
            admin.run(f'DROP DATABASE "{database}" WITH (FORCE)')
        if not exists or fresh:
            admin.run(f'CREATE DATABASE "{database}"')
    finally:
        admin.close()
    return target.with_database(database).url()
