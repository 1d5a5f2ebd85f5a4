"""``zen stats`` reads its window of history, not all of it: on a database holding months of ended jobs (their
history rows) and scaling decisions, the window's status changes, lost attempts and decisions are found through
an index on when each row was written (migration 0066). Without it, each read every row Zen ever kept."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from tests.databases import cloned_database
from zen.store import stats

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)
JOBS = 20_000  # one a minute: two weeks of history, four history rows each (a tenth's last LOST)


@pytest.fixture(scope="module")
def history_db(pg_server, template_db):
    with cloned_database(pg_server, template_db, "stats_history") as db:
        with db.transaction() as session:
            session.sql("""
                INSERT INTO jobs (job_id, status, attempt, max_attempts, cluster, user_id, priority, regions, request,
                                  request_hash, last_seq, submitted_at, updated_at)
                SELECT 'job-' || i, 'SUCCEEDED', 1, 3, CASE WHEN i % 2 = 0 THEN '1xl4' ELSE '4xa100-40gb' END, 'u', 0,
                       '["us-central1"]', '{}', 'h', 0, t.at, t.at
                FROM generate_series(1, CAST(:jobs AS integer)) AS i,
                     LATERAL (SELECT CAST(:now AS timestamptz) - i * interval '1 minute' AS at) AS t""", now=NOW, jobs=JOBS)
            session.sql("""
                INSERT INTO job_events (job_id, at, actor, attempt, from_status, to_status, reason)
                SELECT 'job-' || i, CAST(:now AS timestamptz) - i * interval '1 minute', 'a', 1, step.from_status,
                       CASE WHEN step.to_status = 'SUCCEEDED' AND i % 10 = 0 THEN 'LOST' ELSE step.to_status END, 'r'
                FROM generate_series(1, CAST(:jobs AS integer)) AS i,
                     (VALUES ('PENDING', 'QUEUED'), ('QUEUED', 'ASSIGNED'), ('ASSIGNED', 'RUNNING'),
                             ('RUNNING', 'SUCCEEDED')) AS step(from_status, to_status)""", now=NOW, jobs=JOBS)
            session.sql("""
                INSERT INTO scaling_decisions (at, cluster, region, action, count, vm, reason)
                SELECT CAST(:now AS timestamptz) - i * interval '1 minute', '1xl4', 'us-central1', 'HOLD', 0, NULL, 'r'
                FROM generate_series(1, CAST(:jobs AS integer)) AS i""", now=NOW, jobs=JOBS)
        with db.session() as session:
            session.execute("ANALYZE")
        yield db


@pytest.mark.parametrize("name, table", [("job_status_changes", "job_events"), ("lost_attempts", "job_events"),
                                         ("scaling_decisions", "scaling_decisions")])
def test_a_window_of_stats_reads_the_window_alone(history_db, name, table):
    """An hour's window reads its hour's rows (60 jobs' history here), not the two weeks before it."""
    with history_db.transaction() as session:
        plan = "\n".join(row["QUERY PLAN"] for row in session.sql(
            "EXPLAIN (ANALYZE, TIMING OFF) " + stats.QUERIES[name], since=NOW - timedelta(hours=1)))
        counted = stats.run(session, name, since=NOW - timedelta(hours=1))
    assert f"Seq Scan on {table}" not in plan, plan
    assert sum(int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)) <= 4 * 61, plan
    assert counted  # the window's rows are found all the same
