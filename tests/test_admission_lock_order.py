"""Two admission passes that take two cohorts' transaction-scoped advisory locks in opposite orders (an end that ran its
own queue's pass first, then those of the queues its ending let go, did, before ``DecisionWriter.lock_passes`` took them
together in name order: tests/test_queue_passes_two_ends_at_once.py), on the real Postgres: advisory locks are heavyweight locks, so Postgres' deadlock detector sees the cycle and ends one
transaction (40P01). That one raises ``TransientError`` (the function answers 500, Pub/Sub redelivers; a tick
fails and the next one runs) and is rolled back whole: what it wrote before the second lock is gone, the other
commits."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

from zen.core.errors import TransientError
from zen.store import repository

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_passes_locking_two_cohorts_in_opposite_orders_end_one_whole_and_retried(zen):
    both_hold_one = threading.Barrier(2, timeout=30)
    outcome: dict[str, object] = {}

    def admission(name: str, first: str, second: str) -> None:
        try:
            with zen.store.transaction() as tx:
                tx.queue_lock(f"queue:{first}")
                repository.remember_early_stop(tx.session, f"job-{name}", "written before the second lock", NOW)
                both_hold_one.wait()
                tx.queue_lock(f"queue:{second}")
            outcome[name] = "committed"
        except TransientError as exc:
            outcome[name] = exc

    threads = [threading.Thread(target=admission, args=("a", "research", "prod")),
               threading.Thread(target=admission, args=("b", "prod", "research"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    [ended] = [name for name, result in outcome.items() if isinstance(result, TransientError)]
    assert "deadlock" in str(outcome[ended])
    [committed] = [name for name, result in outcome.items() if result == "committed"]
    with zen.db.transaction() as session:
        kept = {row["job_id"] for row in session.sql("SELECT job_id FROM early_stops")}
    assert kept == {f"job-{committed}"}  # nothing of the ended one is left
