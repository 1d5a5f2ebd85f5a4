"""A database of its own for tests that fill it with much history (query plans, ``zen stats``' windows): made from the
migrated template, dropped after."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator


@contextmanager
def cloned_database(pg_server: Any, template_db: str, name: str) -> Iterator[Any]:
    """A ``zen.store.db.Database`` on ``name``, a copy of ``template_db`` (any earlier one of that name dropped)."""
    from zen.store.db import Database

    admin = Database.from_target(pg_server)
    with admin.session() as session:
        session.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        session.execute(f"CREATE DATABASE {name} TEMPLATE {template_db}")
    db = Database.from_target(pg_server.with_database(name))
    try:
        yield db
    finally:
        db.close()
        with admin.session() as session:
            session.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()
