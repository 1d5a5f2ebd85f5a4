"""The very first scale tick of a database (no ``tick_clock`` row yet: ``record_tick`` inserts it) publishes its
probe of the heartbeat path before its transaction commits (``zen.jobs.probes.send``). A probe heard that soon
found no row to wait on (a lock on ``tick_clock``'s row finds none while the insert is not committed): heard as
none, it stayed unheard, the next probe replaced it two timeouts later and, heard while it was outstanding, read as
a stalled path: every silence counted afresh, and a job whose VM had died was rerun minutes late. The heartbeat
function waits for the tick's transaction, the first too (``lock_tick_clock``)."""

from __future__ import annotations

from tests.test_tick_killed_before_its_probe import _HeardAtOnce
from zen.store.db import Database


def test_the_first_ticks_probe_heard_before_it_commits_vouches_for_the_path(functions, zen, publisher, db_target,
                                                                            clock, config):
    from zen.app import Zen

    with zen.db.transaction() as session:
        assert session.sql("SELECT 1 FROM tick_clock") == []  # the first tick of this database
    ticker_db = Database(db_target.connect)  # the tick's instance
    try:
        ticker_publisher = _HeardAtOnce(publisher, functions, zen.db)
        Zen(config, ticker_db, ticker_publisher, clock).on_scale_tick()
        for hearing in ticker_publisher.hearing:
            hearing.join(10)
    finally:
        ticker_db.close()
    assert len(ticker_publisher.hearing) == 1, ticker_publisher.outcomes
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT probe_nonce, probe_heard_at FROM tick_clock")
    assert row["probe_nonce"] is not None and row["probe_heard_at"] is not None  # heard: the path is vouched for
