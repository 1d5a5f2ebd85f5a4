"""Ordered schema migrations: ``store/migrations/NNNN_name.sql``, applied by ``zen db migrate``.

Each file runs once, in its own transaction, recorded in ``schema_migrations`` with its checksum.
An advisory lock makes concurrent runs (two deploys) safe; running again applies nothing. Never run
on a function's cold start.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from zen.store.db import Database

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_LOCK_KEY = 7_301_001  # arbitrary, fixed: the migration advisory lock

_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


def migration_files(directory: Path = MIGRATIONS_DIR) -> list[tuple[int, str, Path]]:
    found = []
    for path in sorted(directory.glob("*.sql")):
        number, _, name = path.stem.partition("_")
        if not number.isdigit():
            raise ValueError(f"migration {path.name} must start with a number, e.g. 0002_add_quota.sql")
        found.append((int(number), name, path))
    versions = [v for v, _, _ in found]
    if len(set(versions)) != len(versions):
        raise ValueError("two migrations share a number")
    return found


def migrate(db: Database, directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply the migrations not applied yet; return the names applied (empty when up to date)."""
    applied_now: list[str] = []
    with db.session() as session:
        session.sql("SELECT pg_advisory_lock(:key)", key=_LOCK_KEY)
        try:
            session.execute(_BOOKKEEPING)
            rows = session.sql("SELECT version, checksum FROM schema_migrations")
            applied = {row["version"]: row["checksum"] for row in rows}
            for version, name, path in migration_files(directory):
                sql = path.read_text()
                checksum = hashlib.sha256(sql.encode()).hexdigest()
                if version in applied:
                    if applied[version] != checksum:
                        raise RuntimeError(f"migration {path.name} changed after it was applied; add a new one")
                    continue
                session.execute("BEGIN")
                try:
                    session.execute(sql)
                    session.sql(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES (:v, :n, :c)",
                        v=version, n=name, c=checksum,
                    )
                    session.execute("COMMIT")
                except Exception:
                    session.execute("ROLLBACK")
                    raise
                applied_now.append(path.name)
        finally:
            session.sql("SELECT pg_advisory_unlock(:key)", key=_LOCK_KEY)
    return applied_now


def has_table(session, table: str) -> bool:
    """Whether ``table`` exists yet (read commands say "run zen db migrate" rather than fail on SQL)."""
    return bool(session.sql("SELECT to_regclass(:name) IS NOT NULL AS ready", name=table)[0]["ready"])
