"""The embedded Postgres (``pgserver``, a local-only package) for ``zen local up``, the demo and
development: started on demand under ``<home>/pgdata``, stopped explicitly."""

from __future__ import annotations

import os
from pathlib import Path

import pg8000.native

from zen.store.db import parse_database_url


EMBEDDED_DATABASE = "zen"


def embedded_server_url(home: str | os.PathLike | None = None) -> str:
    """Start (or reuse) the embedded Postgres under ``<home>/pgdata`` (home: ``$ZEN_HOME`` or
    ``.zen``) and return the URL of its ``postgres`` database. It keeps running for later commands."""
    data_dir = Path(home or os.environ.get("ZEN_HOME", ".zen")) / "pgdata"
    data_dir.mkdir(parents=True, exist_ok=True)
    return _pgserver().get_server(str(data_dir.resolve()), cleanup_mode=None).get_uri()


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
    try:  # forget this process's handle on the stopped server, so a later call starts it again
        handle = _pgserver().PostgresServer._instances.pop(data_dir, None)
    except ImportError:
        handle = None
    if handle is not None:  # and its exit hook, which would look for the handle (KeyError at exit)
        import atexit

        atexit.unregister(handle._cleanup)
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
