"""Running Zen's functions as their own database roles (migration 0030: zen_submitter, zen_heartbeat,
zen_stopper, zen_ticker) against the tests' real Postgres.

Two ways, both used by tests/test_function_roles.py:

- ``login_as(...)``: a login user that is a member of one role alone, as each deployed function's IAM
  database user is (terraform: db_grants_sql); a ``Database`` connected as it runs that function's
  code, its background threads (the outbox's marks) included.
- ``ZEN_TEST_AS_ROLES=1`` in the environment (``install``, from tests/conftest.py): every test's Zen
  runs each entry point's statements as its function's role (``SET ROLE`` on each connection the
  entry point takes, ``RESET ROLE`` on every other), so the existing function tests check the grants
  as they run: ``ZEN_TEST_AS_ROLES=1 pytest tests/test_functions_lifecycle.py ...``. What a function's
  background thread writes (the outbox's marks) runs as the test's own user there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from typing import Iterator

from zen_dev.local.roles import FUNCTION_ROLES as ROLES  # entry point -> role (terraform's local.functions too)

_acting = threading.local()


@contextlib.contextmanager
def login_as(admin, target, role: str, name: str) -> Iterator:
    """A login user ``name``, a member of ``role`` alone; yields its ConnectionTarget, dropped after."""
    with admin.session() as session:
        session.execute(f"DROP ROLE IF EXISTS {name}")
        session.execute(f"CREATE ROLE {name} LOGIN")
        session.execute(f"GRANT {role} TO {name}")
    try:
        yield dataclasses.replace(target, user=name)
    finally:
        with admin.session() as session:
            # Its sessions may still be open (a pool closed lazily): end them before the role goes.
            session.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :n", n=name)
            session.execute(f"DROP OWNED BY {name}")
            session.execute(f"DROP ROLE {name}")


class PerFunction:
    """One Zen per function behind one object (for ``FunctionsInvoker``, which hands functions/main.py a
    single Zen): each entry point goes to its own function's Zen, as each deployed function has its own."""

    def __init__(self, zens: dict):
        self.zens = zens
        self.config = zens["on_job_submitted"].config
        self.clock = zens["on_job_submitted"].clock  # the time a message is published at (FunctionsInvoker)

    def __getattr__(self, name: str):
        if name not in ROLES:
            raise AttributeError(name)
        return getattr(self.zens[name], name)


def _as_role(method, role: str):
    @functools.wraps(method)
    def run(*args, **kwargs):
        outer = getattr(_acting, "role", None)
        _acting.role = role
        try:
            return method(*args, **kwargs)
        finally:
            _acting.role = outer
    return run


def install(monkeypatch) -> list[str]:
    """Every Zen's entry points run their SQL as their functions' roles (``ZEN_TEST_AS_ROLES=1``). Returns
    the statements refused to a role (``note_refusals``)."""
    from zen.app import Zen
    from zen.core.errors import TransientError
    from zen.store.db import Database, Session

    for method, role in ROLES.items():
        monkeypatch.setattr(Zen, method, _as_role(getattr(Zen, method), role))
    acquire, open_ = Database._acquire, Database._open

    def as_role(conn):
        role = getattr(_acting, "role", None)
        # through a Session: a driver error classified as Zen's own statements' are (a timeout: TransientError)
        Session(conn, {}).execute(f"SET ROLE {role}" if role else "RESET ROLE")

    def acquire_as_role(self):
        conn, pooled = acquire(self)
        try:
            as_role(conn)
        except TransientError:
            if not pooled:
                self._release(conn, broken=True)
                raise
            # dead while pooled: left for its first statement to find, as without roles (Database._begun)
        except BaseException:
            self._release(conn, broken=True)
            raise
        return conn, pooled

    def open_as_role(self):  # a pooled connection found dead at its BEGIN is replaced by one (Database._begun)
        conn = open_(self)
        try:
            as_role(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    monkeypatch.setattr(Database, "_acquire", acquire_as_role)
    monkeypatch.setattr(Database, "_open", open_as_role)
    return note_refusals(monkeypatch, lambda: getattr(_acting, "role", None))


def note_refusals(monkeypatch, who=lambda: "") -> list[str]:
    """Every statement Postgres refuses for want of a privilege, noted ("who: message") as it is raised:
    Zen swallows some failures (a scaling pass's, a price refresh's), so a test fails on any. ``who``:
    whose statement it is (None: not one to note)."""
    from zen.store.db import Session, sqlstate

    refused: list[str] = []
    call = Session._call

    def noting(self, sql, params):
        try:
            return call(self, sql, params)
        except Exception as exc:
            name = who()
            if name is not None and (sqlstate(exc) == "42501" or "permission denied" in str(exc)):
                refused.append(f"{name}: {exc}")
            raise

    monkeypatch.setattr(Session, "_call", noting)
    return refused
