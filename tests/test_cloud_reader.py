"""Reading a job's output from Cloud Logging (zen.joblogs_cloud.CloudReader) against a fake client
that lists entries as the service does (oldest first, the seq filter applied, one page a request)."""

from __future__ import annotations

import io
import re
from datetime import datetime, timezone
from types import SimpleNamespace

from zen import joblogs_cloud
from zen.follow import print_once


class Client:
    def __init__(self):
        self.items, self.requests = [], 0

    def add(self, seq: int, final: bool = False):
        self.items.append(SimpleNamespace(labels={"job_id": "j", "attempt": "1", "stream": "stdout", "vm": "vm"},
                                          payload={"message": f"line {seq}", "seq": seq, "final": final},
                                          timestamp=datetime(2026, 11, 24, tzinfo=timezone.utc)))

    def list_entries(self, resource_names, filter_, order_by, page_size):
        after = int(m.group(1)) if (m := re.search(r"jsonPayload\.seq>(\d+)", filter_)) else 0
        listed = [item for item in self.items if item.payload["seq"] > after]
        for start in range(0, len(listed), page_size):
            self.requests += 1
            yield from listed[start:start + page_size]


def test_an_attempt_longer_than_a_reads_pages_is_printed_to_its_end():
    """A read takes at most READ_PAGES pages (the project's read quota): `zen logs JOB --attempt 1`
    printed the first of them and exited 0."""
    client = Client()
    for seq in range(1, 13):
        client.add(seq, final=seq == 12)
    out = io.StringIO()
    reader = joblogs_cloud.CloudReader(client, "p", page_size=2)
    assert print_once("j", reader, 1, "raw", out, io.StringIO()) == 0
    assert out.getvalue().splitlines() == [f"line {n}" for n in range(1, 13)]


def test_a_line_listed_late_is_not_skipped(monkeypatch):
    """Cloud Logging may list seq 3 before seq 2 is readable: the reader moved past 2 for good."""
    client = Client()
    client.add(1)
    client.add(3)
    reader = joblogs_cloud.CloudReader(client, "p")
    assert [e.seq for e in reader.new_entries("j", 1)] == [1]  # 3 waits for 2
    client.add(2)
    assert [e.seq for e in reader.new_entries("j", 1)] == [2, 3]


def test_a_line_missing_for_good_holds_the_rest_only_a_while(monkeypatch):
    client = Client()
    client.add(1)
    client.add(3)
    reader = joblogs_cloud.CloudReader(client, "p")
    clock = [100.0]
    monkeypatch.setattr(joblogs_cloud.time, "monotonic", lambda: clock[0])
    assert [e.seq for e in reader.new_entries("j", 1)] == [1]
    clock[0] += joblogs_cloud.SETTLE_S
    assert [e.seq for e in reader.new_entries("j", 1)] == [3]
