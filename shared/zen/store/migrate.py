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

# Files the project's history holds with other contents than today's, once applied by a deployed database:
# the checksum recorded then -> the SQL that brings such a database to what the file does now ("" where only
# its comments changed). ``migrate`` runs it once and records the file's checksum. Never add to it to edit an
# applied migration: add a new one (migrations/checksums.txt holds each file's, which tests keep).
REWRITTEN: dict[int, dict[str, str]] = {
    15: {"f6ab05f5a0983acc8f175419a6fe98c7bf5dd5b04536f68abbb31327cac11807": ""},
    31: {"7f79d92a83400b23d8a6488ce418a5e1a2457e9d69d42b1eb9bc8942a0091c0d": ""},
    35: {"6477f3d5660f17e88b1a51922f29ee689fc3b677d183405a75013825b6d31842": ""},
    # 0036_gang_left.sql: a gang's departed nodes, which jobs.left_vms holds with a one-VM job's (same shape);
    # gang_left is kept (not renamed): the release that wrote it names it until the new code is deployed
    36: {"e529cf0e02b9c2b1600030594cceaddffa6c3261014952fc58d3028353d7fe4b":
         "ALTER TABLE jobs ADD COLUMN left_vms jsonb; UPDATE jobs SET left_vms = gang_left WHERE gang_left IS NOT NULL;"
         " GRANT UPDATE (left_vms) ON jobs TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker"},
    # 0041_probe_vouched.sql first added probe_vouched_at alone: a probe replaced unheard is kept as the previous one
    41: {"48809e3567ac3cd985c4e59b0ba5f02ecf91aef88165625c3d0747539c297345":
         "ALTER TABLE tick_clock ADD COLUMN probe_prev_nonce text; ALTER TABLE tick_clock ADD COLUMN probe_prev_sent_at"
         " timestamptz; GRANT UPDATE (probe_vouched_at, probe_prev_nonce, probe_prev_sent_at) ON tick_clock TO"
         " zen_ticker, zen_heartbeat"},
}

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
                        applied_now += _rewritten(session, path, version, name, applied[version], checksum, pause_s)
                    continue
                if applied and version < max(applied):
                    raise RuntimeError(f"migration {path.name} is numbered below {max(applied)}, already applied: "
                                       f"renumber it above {max(applied)}")
                _apply(session, path, sql, version, name, checksum, pause_s)
                applied_now.append(path.name)
        finally:
            session.sql("SELECT pg_advisory_unlock(:key)", key=_LOCK_KEY)
    return applied_now


def _apply(session: Session, path: Path, sql: str, version: int, name: str, checksum: str, pause_s: float,
           rewrite: bool = False) -> None:
    """``sql`` and its record in one transaction (``rewrite``: the record of an earlier text, updated)."""
    record = ("UPDATE schema_migrations SET name = :n, checksum = :c WHERE version = :v" if rewrite else
              "INSERT INTO schema_migrations (version, name, checksum) VALUES (:v, :n, :c)")
    for attempt in range(1, LOCK_TRIES + 1):
        session.execute("BEGIN")
        try:
            session.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_S}s'")
            if sql:
                session.execute(sql)
            session.sql(record, v=version, n=name, c=checksum)
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


def _rewritten(session: Session, path: Path, version: int, name: str, recorded: str, checksum: str,
               pause_s: float) -> list[str]:
    """A migration applied with an earlier text of its file: brought to today's by ``REWRITTEN``'s SQL."""
    repair = REWRITTEN.get(version, {}).get(recorded)
    if repair is None:
        raise RuntimeError(f"migration {path.name} changed after it was applied (checksum {recorded[:12]} recorded, "
                           f"{checksum[:12]} now); add a new one")
    _apply(session, path, repair, version, name, checksum, pause_s, rewrite=True)
    return [f"{path.name} (recorded with an earlier text: {'its SQL brought up to date' if repair else 'comments only'})"]


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
