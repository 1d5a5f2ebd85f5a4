"""Ordered schema migrations: ``store/migrations/NNNN_name.sql``, applied by ``zen db migrate`` (never on
a function's cold start), each once and recorded with its checksum; ``schema_lag`` tells the functions
when the schema is older than their code, so they refuse to work on it.

The rules (checksums, numbering, the lock, lock timeouts) and the upgrade order: docs/how-to/deploy.md,
step 3.
"""

from __future__ import annotations

import hashlib
import time
from functools import lru_cache
from pathlib import Path

from zen.store.db import Database, Session, sqlstate

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_LOCK_KEY = 7_301_001  # arbitrary, fixed: the migration advisory lock
LOCK_TIMEOUT_S = 5
LOCK_TRIES = 5
_LOCK_NOT_AVAILABLE = "55P03"

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


def migrate(db: Database, directory: Path = MIGRATIONS_DIR, *, pause_s: float = 2.0) -> list[str]:
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
                if applied and version < max(applied):
                    raise RuntimeError(f"migration {path.name} is numbered below {max(applied)}, already applied: "
                                       f"renumber it above {max(applied)}")
                _apply(session, path, sql, version, name, checksum, pause_s)
                applied_now.append(path.name)
        finally:
            session.sql("SELECT pg_advisory_unlock(:key)", key=_LOCK_KEY)
    return applied_now


def _apply(session: Session, path: Path, sql: str, version: int, name: str, checksum: str, pause_s: float) -> None:
    for attempt in range(1, LOCK_TRIES + 1):
        session.execute("BEGIN")
        try:
            session.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_S}s'")
            session.execute(sql)
            session.sql("INSERT INTO schema_migrations (version, name, checksum) VALUES (:v, :n, :c)",
                        v=version, n=name, c=checksum)
            session.execute("COMMIT")
            return
        except Exception as exc:
            session.execute("ROLLBACK")
            if sqlstate(exc) != _LOCK_NOT_AVAILABLE:
                raise RuntimeError(f"migration {path.name} failed, nothing of it applied: {exc}") from exc
            if attempt == LOCK_TRIES:
                raise RuntimeError(
                    f"migration {path.name} waited {LOCK_TIMEOUT_S} s for a table lock {LOCK_TRIES} times: a long "
                    "transaction holds it (see pg_stat_activity); nothing of it applied, run zen db migrate again"
                ) from exc
            time.sleep(pause_s)


@lru_cache(maxsize=4)
def latest_version(directory: Path = MIGRATIONS_DIR) -> int:
    return max((version for version, _, _ in migration_files(directory)), default=0)


def schema_lag(session: Session, directory: Path = MIGRATIONS_DIR) -> str | None:
    """Why the database's schema is older than this code's migrations; None when it is not."""
    needed = latest_version(directory)
    at = (session.sql("SELECT COALESCE(max(version), 0) AS v FROM schema_migrations")[0]["v"]
          if has_table(session, "schema_migrations") else 0)
    if at >= needed:
        return None
    return (f"the database schema is at migration {at} and this code needs {needed}: run `zen db migrate` "
            "(upgrades migrate before deploying: docs/how-to/deploy.md)")


def has_table(session: Session, table: str) -> bool:
    """Whether ``table`` exists yet (read commands say "run zen db migrate" rather than fail on SQL)."""
    return bool(session.sql("SELECT to_regclass(:name) IS NOT NULL AS ready", name=table)[0]["ready"])
