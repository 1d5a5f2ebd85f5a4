"""A line missing for good (an entry the sink refused as too large and dropped, or one Cloud Logging lost) in an
attempt with more than ``READ_PAGES`` pages of lines after it: each read of ``zen logs -f`` (and of the console)
listed the attempt again from the missing line, read its ``READ_PAGES`` pages, held them all for the line (the
listing was cut short, so it could still come) and printed nothing; the next read did the same, for ever. Read
through the official client against the Cloud Logging stand-in."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tests.logging_standin import LoggingStandIn
from zen.adapters import cloud_logging as joblogs_cloud


def _entry(seq: int, final: bool = False) -> dict:
    at = datetime(2026, 11, 24, tzinfo=timezone.utc) + timedelta(milliseconds=seq)
    return {"logName": "projects/p/logs/zen-jobs", "resource": {"type": "global", "labels": {}},
            "labels": {"job_id": "j", "attempt": "1", "stream": "stdout", "vm": "vm"},
            "jsonPayload": {"message": f"line {seq}", "seq": seq, "final": final},
            "timestamp": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "insertId": f"j-1-vm-{seq}"}


def test_lines_past_a_line_missing_for_good_are_followed_to_the_final_one(monkeypatch):
    monkeypatch.setattr(joblogs_cloud, "REQUEST_INTERVAL_S", 0, raising=False)
    monkeypatch.setattr(joblogs_cloud, "SETTLE_S", 0.0, raising=False)  # the missing line is waited for no longer
    last = 2 + 3 * joblogs_cloud.READ_PAGES * 10  # three reads of READ_PAGES pages of 10 past the missing line
    with LoggingStandIn() as cloud:
        cloud.entries.extend(_entry(seq, final=seq == last) for seq in range(1, last + 1) if seq != 2)
        reader = joblogs_cloud.CloudReader(joblogs_cloud.logging_client("p", cloud.endpoint), "p", page_size=10)
        printed: list[int] = []
        for _ in range(10):  # as many polls of `zen logs -f` as it takes, and then some
            printed += [entry.seq for entry in reader.new_entries("j", 1)]
            if printed and printed[-1] == last:
                break
    assert printed == [1, *range(3, last + 1)]  # each line after the missing one once, in order, to the final one


def test_a_line_listed_late_within_a_reads_pages_is_still_waited_for(monkeypatch):
    """The hold ends only at the end of a read that listed its pages from the gap: a missing line that shows up
    (ingested late) on its third page is printed in its place, not skipped."""
    monkeypatch.setattr(joblogs_cloud, "REQUEST_INTERVAL_S", 0, raising=False)
    monkeypatch.setattr(joblogs_cloud, "SETTLE_S", 0.0, raising=False)
    last = 2 + 3 * joblogs_cloud.READ_PAGES * 10
    with LoggingStandIn() as cloud:
        cloud.entries.extend(_entry(seq, final=seq == last) for seq in range(1, last + 1) if seq != 2)
        reader = joblogs_cloud.CloudReader(joblogs_cloud.logging_client("p", cloud.endpoint), "p", page_size=10)
        printed = [entry.seq for entry in reader.new_entries("j", 1)]
        late = _entry(2)
        late["timestamp"] = _entry(25)["timestamp"]  # its VM's clock stepped: listed with the third page
        cloud.entries.append(late)
        for _ in range(10):
            printed += [entry.seq for entry in reader.new_entries("j", 1)]
            if printed and printed[-1] == last:
                break
    assert printed == list(range(1, last + 1))
