"""The times in ``zen explain``'s line and the console's: dated unless they are of the day they are read on
(a scaling decision of yesterday read as one of today, ``14:05:03``, sent a user looking at the wrong hour)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from zen.cli.queues import local_time, utc_time

NOW = datetime(2026, 12, 4, 16, 30, tzinfo=timezone.utc)


def test_a_time_of_today_is_a_time_of_day_and_an_older_one_is_dated():
    assert utc_time(NOW - timedelta(hours=2), NOW) == "14:30:00 UTC"
    assert utc_time(NOW - timedelta(days=1), NOW) == "2026-12-03 16:30:00 UTC"
    assert utc_time(NOW + timedelta(hours=8), NOW) == "2026-12-05 00:30:00 UTC"  # a due time past midnight


def test_the_local_line_dates_by_the_local_day(monkeypatch):
    import time
    monkeypatch.setenv("TZ", "America/Los_Angeles")  # NOW is 08:30 there; 07:30 UTC was 23:30 the day before
    time.tzset()
    try:
        assert local_time(NOW - timedelta(hours=2), NOW) == "06:30:00"
        assert local_time(NOW - timedelta(hours=9), NOW) == "2026-12-03 23:30:00"
    finally:
        monkeypatch.undo()
        time.tzset()
