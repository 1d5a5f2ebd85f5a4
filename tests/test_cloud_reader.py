"""Reading a job's output from Cloud Logging (zen.adapters.cloud_logging.CloudReader) against a fake client
that lists entries as the service does (oldest first, the seq filters applied, one page a request)."""

from __future__ import annotations

import io
import re
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from google.api_core import exceptions as gexc

from tests.logging_standin import LoggingStandIn
from zen.adapters import cloud_logging as joblogs_cloud
from zen.cli.follow import print_once


def unread(filter_: str):
    """The reader's `NOT (labels.vm="V" AND jsonPayload.seq<=N)` clauses, as the service applies them: whether
    an item is not read yet."""
    read = {vm: int(n) for vm, n in re.findall(r'NOT \(labels\.vm="([^"]*)" AND jsonPayload\.seq<=(\d+)\)', filter_)}
    return lambda item: item.payload["seq"] > read.get(item.labels.get("vm", ""), 0)


class Client:
    def __init__(self):
        self.items, self.requests = [], 0

    def add(self, seq: int, final: bool = False):
        self.items.append(SimpleNamespace(labels={"job_id": "j", "attempt": "1", "stream": "stdout", "vm": "vm"},
                                          payload={"message": f"line {seq}", "seq": seq, "final": final},
                                          timestamp=datetime(2026, 11, 24, tzinfo=timezone.utc)))

    def list_entries(self, resource_names, filter_, order_by, page_size):
        fresh = unread(filter_)
        listed = [item for item in self.items if fresh(item)]
        for start in range(0, len(listed), page_size):
            self.requests += 1
            yield from listed[start:start + page_size]


def test_an_attempt_longer_than_a_reads_pages_is_printed_to_its_end(monkeypatch):
    """A read takes at most READ_PAGES pages (the project's read quota): `zen logs JOB --attempt 1`
    printed the first of them and exited 0."""
    client = Client()
    for seq in range(1, 13):
        client.add(seq, final=seq == 12)
    out = io.StringIO()
    monkeypatch.setattr(joblogs_cloud, "REQUEST_INTERVAL_S", 0, raising=False)
    reader = joblogs_cloud.CloudReader(client, "p", page_size=2)
    assert print_once("j", reader, 1, "raw", out, io.StringIO()) == 0
    assert out.getvalue().splitlines() == [f"line {n}" for n in range(1, 13)]


def test_a_line_listed_late_is_not_skipped(monkeypatch):
    """Cloud Logging may list seq 3 before seq 2 is readable: the reader moved past 2 for good."""
    client = Client()
    client.add(1)
    client.add(3)
    monkeypatch.setattr(joblogs_cloud, "REQUEST_INTERVAL_S", 0, raising=False)
    reader = joblogs_cloud.CloudReader(client, "p")
    assert [e.seq for e in reader.new_entries("j", 1)] == [1]  # 3 waits for 2
    client.add(2)
    assert [e.seq for e in reader.new_entries("j", 1)] == [2, 3]


def test_a_line_missing_for_good_holds_the_rest_only_a_while(monkeypatch):
    client = Client()
    client.add(1)
    client.add(3)
    monkeypatch.setattr(joblogs_cloud, "REQUEST_INTERVAL_S", 0, raising=False)
    reader = joblogs_cloud.CloudReader(client, "p")
    clock = [100.0]
    monkeypatch.setattr(joblogs_cloud.time, "monotonic", lambda: clock[0])
    assert [e.seq for e in reader.new_entries("j", 1)] == [1]
    clock[0] += joblogs_cloud.SETTLE_S
    assert [e.seq for e in reader.new_entries("j", 1)] == [3]


class QuotaClient:
    """Lists as the service does, one request a page (fetched when the reader gets to it), on a clock
    of its own: a request after ``quota`` answered ones in the last minute is answered 429
    (ResourceExhausted), as the project's read quota (~60 entries.list a minute) is."""

    def __init__(self, quota: int = 60):
        self.items, self.now, self.quota = [], 0.0, quota
        self.answered: list[float] = []
        self.requests = self.refused = 0

    def add(self, attempt: int, seq: int, final: bool = False):
        self.items.append(SimpleNamespace(
            labels={"job_id": "j", "attempt": str(attempt), "stream": "stdout", "vm": "vm"},
            payload={"message": f"{attempt}/{seq}", "seq": seq, "final": final},
            timestamp=datetime(2026, 11, 24, tzinfo=timezone.utc) + timedelta(milliseconds=len(self.items))))

    def sleep(self, seconds: float):
        self.now += seconds

    def list_entries(self, resource_names, filter_, order_by, page_size):
        attempt = m.group(1) if (m := re.search(r'labels\.attempt="(\d+)"', filter_)) else None
        since = datetime.fromisoformat(re.findall(r'timestamp>="([^"]+)"', filter_)[-1].replace("Z", "+00:00"))
        fresh = unread(filter_)
        listed = [item for item in self.items if fresh(item) and item.timestamp >= since
                  and attempt in (None, item.labels["attempt"])]
        for start in range(0, len(listed) + 1, page_size):
            self.answered = [t for t in self.answered if self.now - t < 60]
            if len(self.answered) >= self.quota:
                self.refused += 1
                raise gexc.ResourceExhausted("Quota exceeded for quota metric 'Read requests'")
            self.answered.append(self.now)
            self.requests += 1
            yield from listed[start:start + page_size]
            if start + page_size >= len(listed):
                return


class Out(io.StringIO):
    """Notes how many requests had been made when the first line was printed."""

    def __init__(self, client):
        super().__init__()
        self.client, self.first_at = client, None

    def write(self, text):
        if self.first_at is None:
            self.first_at = self.client.requests
        return super().write(text)


@pytest.mark.parametrize("attempt", [None, 1, 2])
@pytest.mark.parametrize("quota", [60, 20])
def test_a_100k_line_output_is_printed_whole_under_the_read_quota(attempt, quota, monkeypatch):
    """100,000 lines (two attempts) against a read quota of 60 requests a minute (and of 20: others
    reading too): `zen logs JOB` read every page in one burst and printed nothing (429 past 60 pages:
    exit 1), `--attempt N` read 5-page bursts with no pause (429 after 60,000 lines). Now every line
    is printed once, in order, as the pages are read; a 429 is made again after a backoff."""
    client = QuotaClient(quota)
    sizes = {1: 40_000, 2: 60_000}
    for number, size in sizes.items():
        for seq in range(1, size + 1):
            client.add(number, seq, final=seq == size)
    monkeypatch.setattr(joblogs_cloud, "time", SimpleNamespace(sleep=client.sleep, monotonic=lambda: client.now))
    reader = joblogs_cloud.CloudReader(client, "p")
    out, err = Out(client), io.StringIO()

    assert print_once("j", reader, attempt, "raw", out, err) == 0, err.getvalue()

    want = [f"{n}/{seq}" for n in ([attempt] if attempt else sizes) for seq in range(1, sizes[n] + 1)]
    assert out.getvalue().splitlines() == want  # all of them, in order, none twice
    assert out.first_at == 1 < client.requests  # printed from the first page on
    assert (client.refused > 0) == (quota < 60)  # paced under the quota; retried when it is shared


def test_an_attempt_read_to_its_final_entry_is_not_read_again(monkeypatch):
    """`zen logs -f` read every attempt again at each poll, its final entry read or not (quota spent). Once its
    VMs' final entries are read, it is read once more (a gang's other node may lag), then never again."""
    client = QuotaClient()
    for seq in range(1, 4):
        client.add(1, seq, final=seq == 3)
    monkeypatch.setattr(joblogs_cloud, "time", SimpleNamespace(sleep=client.sleep, monotonic=lambda: client.now))
    reader = joblogs_cloud.CloudReader(client, "p")
    assert [e.seq for e in reader.new_entries("j", 1)] == [1, 2, 3]
    made = client.requests
    assert reader.new_entries("j", 1) == [] and client.requests == made + 1
    assert reader.new_entries("j", 1) == [] and client.requests == made + 1


def test_entries_held_at_a_gap_are_kept_across_pages(monkeypatch):
    """seq 3 is listed two pages after 4 and 5: those wait for it, and none is lost or printed twice."""
    client = Client()
    for seq in (1, 2, 4, 5, 3, 6, 7):
        client.add(seq, final=seq == 7)
    for attempt in (None, 1):
        out = io.StringIO()
        monkeypatch.setattr(joblogs_cloud, "REQUEST_INTERVAL_S", 0, raising=False)
        reader = joblogs_cloud.CloudReader(client, "p", page_size=2)
        assert print_once("j", reader, attempt, "raw", out, io.StringIO()) == 0
        assert out.getvalue().splitlines() == [f"line {n}" for n in range(1, 8)]


def test_the_official_client_is_paced_and_retried_past_a_throttling_stand_in(monkeypatch):
    """Through the official client (HTTP/JSON) against the stand-in answering 429 past 6 lists in
    1.2 s (scaled down from ~60 a minute): 2,000 lines in 10 pages, each printed once, in order. (Each pass
    is throttled while a list takes under 0.2 s: also on a loaded machine, where 5 in 0.5 s was not.)"""
    monkeypatch.setattr(joblogs_cloud, "RETRY_FIRST_S", 0.1, raising=False)
    monkeypatch.setattr(joblogs_cloud, "RETRY_MAX_S", 0.3, raising=False)
    monkeypatch.setattr(joblogs_cloud, "REQUEST_INTERVAL_S", 0.02, raising=False)
    with LoggingStandIn(list_quota=(6, 1.2)) as cloud:
        for seq in range(1, 2001):
            cloud.entries.append({
                "logName": "projects/p/logs/zen-jobs", "resource": {"type": "global", "labels": {}},
                "labels": {"job_id": "j", "attempt": "1", "stream": "stdout", "vm": "vm"},
                "jsonPayload": {"message": f"line {seq}", "seq": seq, "final": seq == 2000},
                "timestamp": (datetime(2026, 11, 24, tzinfo=timezone.utc) + timedelta(microseconds=seq))
                .strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "insertId": f"j-1-{seq}"})
        for attempt in (None, 1):
            cloud.throttled = 0
            out = io.StringIO()
            reader = joblogs_cloud.CloudReader(joblogs_cloud.logging_client("p", cloud.endpoint), "p", page_size=200)
            assert print_once("j", reader, attempt, "raw", out, io.StringIO()) == 0
            assert out.getvalue().splitlines() == [f"line {n}" for n in range(1, 2001)]
            assert cloud.throttled > 0
