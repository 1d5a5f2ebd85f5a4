"""When an agent's silence starts to count (``zen.store.fleet.heard_since``): as the lost-job sweep
counts a job's, from when Zen could hear again after an outage of its own (the tick clock's
``back_at``), or, before the first tick after one, from the newest heartbeat recorded since."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from zen.store import fleet, repository

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


def test_heard_since_is_the_tick_clocks_return_or_the_newest_heartbeat_while_the_ticks_lag():
    back = NOW - timedelta(minutes=5)
    clock = {"last_at": NOW - timedelta(seconds=30), "interval_s": 60.0, "back_at": back}
    assert fleet.heard_since(None, [NOW]) is None  # no tick yet
    assert fleet.heard_since(clock, [NOW - timedelta(seconds=10), None]) == back
    # The first submission after an outage, before the first tick: heartbeats flow, the ticks lag.
    stale = {**clock, "last_at": NOW - timedelta(hours=2)}
    assert fleet.heard_since(stale, [NOW - timedelta(hours=3), NOW - timedelta(seconds=5)]) == NOW - timedelta(seconds=5)
    assert fleet.heard_since(stale, [NOW - timedelta(hours=3)]) == back


def test_the_agents_rows_carry_when_zen_could_hear_again(db):
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with db.transaction() as session:
        repository.upsert_vm(session, name="vm1", cluster="c", region="us-central1", zone="us-central1-a",
                             state="IDLE", job_id=None, attempt=None, seq=1, sent_at=t0, now=t0)
        assert fleet.agents(session, "c")["vm1"]["heard_since"] is None  # no tick yet
        for minute in range(3):
            repository.record_tick(session, t0 + timedelta(minutes=minute), 60)
        repository.record_tick(session, t0 + timedelta(hours=1), 60)  # an hour without ticks: Zen was down
        assert fleet.agents(session, "c")["vm1"]["heard_since"] == t0 + timedelta(hours=1)
