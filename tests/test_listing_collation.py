"""The job list (``zen.store.repository.recent_jobs``: the console's, ``zen jobs list``) on a database whose
collation is Cloud SQL's default, ``en_US.UTF8``, not the embedded Postgres's ``C.UTF-8``: that collation
orders ``eval-1`` before ``Train-1`` where Python's string order (byte order) puts it after, and a member's
reads (their own jobs, each of their queues') are merged in Python. The locale is compiled here with
``localedef`` (glibc's, from Debian's ``locales`` data) and handed to a Postgres of this module's own through
``LOCPATH``."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from datetime import datetime, timedelta, timezone

import pytest

from zen.store import repository
from zen.store.db import Database, parse_database_url
from zen.store.migrate import migrate

T = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
# (job_id, owner, queue, submitted_at): two arrays' tasks at one microsecond, alice's and bob's, some in q1.
JOBS = [("Train-1", "alice", None, T), ("eval-1", "alice", "q1", T), ("run_a-1", "bob", "q1", T),
        ("run-b-1", "alice", None, T), ("older", "alice", None, T - timedelta(seconds=1))]


@pytest.fixture(scope="module")
def en_us_db():
    """A migrated database created with LC_COLLATE 'en_US.UTF-8' on an embedded Postgres of its own."""
    from zen_dev.embedded import server_url, start_server

    root = tempfile.mkdtemp(prefix="zpgl", dir="/tmp")  # short: the server's unix socket lives under it
    os.mkdir(f"{root}/locales")
    made = subprocess.run(["localedef", "-i", "en_US", "-f", "UTF-8", f"{root}/locales/en_US.UTF-8"],
                          capture_output=True, text=True) if shutil.which("localedef") else None
    if made is None or made.returncode != 0:  # (make test installs Debian's locales where it can: Makefile, browser)
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"glibc's en_US locale cannot be compiled here: {made.stderr.strip() if made else 'no localedef'}")
    before = os.environ.get("LOCPATH")
    os.environ["LOCPATH"] = f"{root}/locales"  # read by the server's processes, started with this environment
    try:
        os.mkdir(f"{root}/data")
        server = start_server(f"{root}/data", cleanup_mode="stop")
    finally:
        if before is None:
            os.environ.pop("LOCPATH")
        else:
            os.environ["LOCPATH"] = before
    target = parse_database_url(server_url(server))
    admin = Database.from_target(target)
    with admin.session() as session:
        session.execute("CREATE DATABASE en_us TEMPLATE template0 LC_COLLATE 'en_US.UTF-8' LC_CTYPE 'en_US.UTF-8'")
    admin.close()
    db = Database.from_target(target.with_database("en_us"))
    migrate(db)
    with db.transaction() as session:
        for job_id, owner, queue, at in JOBS:
            session.sql("""
                INSERT INTO jobs (job_id, status, attempt, max_attempts, cluster, user_id, priority, regions, request,
                                  request_hash, last_seq, submitted_at, queued_at, updated_at, queue, gpus)
                VALUES (:job_id, 'SUCCEEDED', 1, 3, '1xl4', :owner, 0, '["us-central1"]', '{}', 'h', 0, :at, :at,
                        :at, :queue, 1)""", job_id=job_id, owner=owner, queue=queue, at=at)
    yield db
    db.close()
    server.cleanup()
    shutil.rmtree(root, ignore_errors=True)


def _pages(db: Database, limit: int, viewer: tuple[str, list[str]] | None) -> list[list[str]]:
    """Every page of the list, each started at the last row of the one before, as the console's next link does."""
    pages: list[list[str]] = []
    before = None
    with db.transaction() as session:
        while len(pages) < 10:
            jobs = repository.recent_jobs(session, limit=limit, before=before, viewer=viewer)
            if not jobs:
                return pages
            pages.append([job.job_id for job in jobs])
            before = (jobs[-1].submitted_at, jobs[-1].job_id)
    return pages


def test_the_database_orders_text_as_cloud_sqls_default_does(en_us_db):
    with en_us_db.transaction() as session:
        row = session.sql("SELECT 'eval-1' < 'Train-1' AS eval_first, 'run_a' < 'run-b' AS underscore_first")[0]
    assert row == {"eval_first": True, "underscore_first": True}  # byte order (Python's): both False


def test_a_members_list_shows_each_of_their_jobs_once_in_order(en_us_db):
    """alice sees her jobs and q1's (bob's run_a-1): each once, newest first, ties in byte order, on one page."""
    with en_us_db.transaction() as session:
        jobs = repository.recent_jobs(session, limit=50, viewer=("alice", ["q1"]))
    assert [job.job_id for job in jobs] == ["run_a-1", "run-b-1", "eval-1", "Train-1", "older"]


@pytest.mark.parametrize("limit", [1, 2, 3])
@pytest.mark.parametrize("viewer", [None, ("alice", ["q1"])], ids=["admin", "member"])
def test_paging_on_lists_every_job_once(en_us_db, limit, viewer):
    """Page after page, each job once: none again on a later page, none skipped."""
    seen = [job_id for page in _pages(en_us_db, limit, viewer) for job_id in page]
    expected = [job_id for job_id, owner, queue, _ in JOBS if viewer is None or owner == "alice" or queue == "q1"]
    assert seen == sorted(expected, key=lambda job_id: (job_id != "older", job_id), reverse=True)
