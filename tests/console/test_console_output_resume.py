"""A job's output stream on the console (zen.console.app): resumed after a reconnect (the browser's
Last-Event-ID: a dropped connection, or the stream's 5 minutes up), it read the attempt again from its first
line, paced at the project's read quota, and the catch-up counted as quiet: an ended job's stream said "this is
all of its output" before the lines the page lacked were read, a running job's long output never showed a new
line. And an earlier attempt's last lines, which Cloud Logging may show after the next attempt's first, were
dropped as sent."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from datetime import datetime, timezone
from types import SimpleNamespace

from tests.console.test_console_app import setup  # noqa: F401 - fixture
from tests.messages import agent_run, job_request
from tests.test_cloud_reader import Client  # lists entries as Cloud Logging does
from zen.adapters import cloud_logging
from zen.adapters.joblogs import LocalReader, LocalSink, OutputEntry
from zen.console.app import create_app
from zen.console.viewers import local_identity
from zen.core.errors import TransientError

LINES = 1000


def _streamed(zen, clock, reader_factory, job_id: str, last_id: str | None, wait_s: float) -> tuple[str, list[str]]:
    """The console's output stream of ``job_id`` as alice's browser reads it (resumed from ``last_id``, if any):
    the stream's text, and its lines' texts."""
    app = create_app(zen.config, zen.db, local_identity("alice"), reader_factory=reader_factory, clock=clock,
                     output_timing=(0.01, wait_s))
    headers = {"Last-Event-ID": last_id} if last_id else {}
    stream = app.test_client().get(f"/jobs/{job_id}/output", headers=headers).get_data(as_text=True)
    return stream, [json.loads(m.group(1))["text"] for m in re.finditer(r"event: line\ndata: (.+)\n", stream)]


def test_a_resumed_stream_sends_the_lines_after_its_resume_point(setup, clock, monkeypatch):
    zen, functions, _, _ = setup
    functions.submit(job_request("j", user_id="alice"))
    for beat in agent_run("j", vm="vm"):
        functions.heartbeat(beat)
        clock.advance(5)
    client = Client()
    for seq in range(1, LINES + 1):
        client.add(seq, final=seq == LINES)
    monkeypatch.setattr(cloud_logging, "REQUEST_INTERVAL_S", 0.02)
    # The browser got lines 1..900, then its connection was cut; it reconnects with the last id it got.
    stream, texts = _streamed(zen, clock, lambda: cloud_logging.CloudReader(client, "p", page_size=10), "j",
                              "1:vm=900", 0.2)
    assert "event: end" in stream  # "the job ended (SUCCEEDED): this is all of its output"
    assert texts == [f"line {n}" for n in range(901, LINES + 1)], (len(texts), client.requests)


class LateReader:
    """A reader as Cloud Logging answers: attempt 1's last line becomes readable one poll after attempt 2's first."""

    def __init__(self):
        self.polls: dict[int, int] = {}

    def new_entries(self, job_id, attempt=None):
        n = self.polls[attempt] = self.polls.get(attempt, 0) + 1
        if attempt == 1 and n == 1:
            return [OutputEntry(job_id, 1, "stdout", "vm-a", 1, "t", "attempt 1: epoch 1")]
        if attempt == 2 and n == 1:
            return [OutputEntry(job_id, 2, "stdout", "vm-b", 1, "t", "attempt 2: resumed")]
        if attempt == 1 and n == 2:  # ingested late: the preempted attempt's last words
            return [OutputEntry(job_id, 1, "stderr", "vm-a", 2, "t", "attempt 1: checkpoint saved", final=True)]
        return []


def test_an_earlier_attempts_late_lines_are_streamed(setup, clock):
    zen, functions, _, _ = setup
    functions.submit(job_request("p1", user_id="alice"))
    for beat in agent_run("p1", vm="vm-a", final="PREEMPTED"):
        functions.heartbeat(beat)
        clock.advance(5)
    for beat in agent_run("p1", attempt=2, vm="vm-b"):
        functions.heartbeat(beat)
        clock.advance(5)
    with zen.db.transaction() as session:
        from zen.store import repository

        job = repository.get_job(session, "p1")
    assert (job.status.value, job.attempt) == ("SUCCEEDED", 2)
    _, texts = _streamed(zen, clock, LateReader, "p1", None, 0.2)
    assert "attempt 1: checkpoint saved" in texts, texts


class AttemptsClient:
    """Lists entries as Cloud Logging does, attempt filter and the seq clauses applied, one page a request."""

    def __init__(self):
        self.items = []

    def add(self, attempt, seq, final=False):
        self.items.append(SimpleNamespace(
            labels={"job_id": "p1", "attempt": str(attempt), "stream": "stdout", "vm": f"vm-{attempt}"},
            payload={"message": f"a{attempt} line {seq}", "seq": seq, "final": final},
            timestamp=datetime(2026, 11, 24, tzinfo=timezone.utc)))

    def list_entries(self, resource_names, filter_, order_by, page_size):
        attempt = re.search(r'labels\.attempt="(\d+)"', filter_).group(1)
        read = {vm: int(n) for vm, n in re.findall(r'NOT \(labels\.vm="([^"]*)" AND jsonPayload\.seq<=(\d+)\)', filter_)}
        yield from [i for i in self.items if i.labels["attempt"] == attempt
                    and i.payload["seq"] > read.get(i.labels["vm"], 0)]


def test_an_old_pages_resume_does_not_send_its_lines_again(setup, clock, monkeypatch):
    """An older page's id (``attempt:seq``) counted that attempt's lines as unsent once the next attempt's first
    line was sent, and its re-read (from line 1: ``*`` is no VM to read past) went out a second time."""
    zen, functions, _, _ = setup
    functions.submit(job_request("p1", user_id="alice"))
    for attempt, final in ((1, "PREEMPTED"), (2, "PREEMPTED"), (3, "SUCCEEDED")):
        for beat in agent_run("p1", attempt=attempt, vm=f"vm-{attempt}", final=final):
            functions.heartbeat(beat)
            clock.advance(5)
    client = AttemptsClient()
    for seq in range(1, 11):
        client.add(2, seq, final=seq == 10)
    client.add(3, 1, final=True)
    monkeypatch.setattr(cloud_logging, "REQUEST_INTERVAL_S", 0)
    # a page loaded before the deploy: it had all of attempt 2 (its id: "2:10"), and reconnects
    _, texts = _streamed(zen, clock, lambda: cloud_logging.CloudReader(client, "p", page_size=1), "p1", "2:10", 0.3)
    assert texts == ["a3 line 1"], texts


class _Blinking:
    """The console's database, failing every transaction while ``down`` (a Cloud SQL failover: seconds)."""

    def __init__(self, db):
        self.db, self.down = db, False

    @contextmanager
    def transaction(self):
        if self.down:
            raise TransientError("Postgres is unavailable: connection refused")
        with self.db.transaction() as session:
            yield session


def test_an_output_stream_that_meets_a_database_blip_is_told_to_come_back(setup, clock):
    """A reconnect during a failover was answered with a 503 HTML page, and an EventSource answered anything but
    an event stream gives up for good: every open job page's output stopped while it said "following the
    output". A stream that meets one ends (the browser comes back after ``retry``), not broken."""
    zen, functions, _, logs = setup
    functions.submit(job_request("a1", user_id="alice"))
    for beat in agent_run("a1", vm="vm-a")[:2]:  # CLAIMED, RUNNING: it runs on
        functions.heartbeat(beat)
    LocalSink(logs).write([OutputEntry("a1", 1, "stdout", "vm-a", 1, "t", "step one")])
    database = _Blinking(zen.db)
    client = create_app(zen.config, database, local_identity("alice"), reader_factory=lambda: LocalReader(logs),
                        clock=clock, output_timing=(0.01, 0.1)).test_client()
    database.down = True
    answer = client.get("/jobs/a1/output", headers={"Last-Event-ID": "1:vm-a=1"})
    assert (answer.status_code, answer.mimetype) == (200, "text/event-stream")
    assert answer.get_data(as_text=True).startswith("retry: ")
    database.down = False

    class FailoverAfterRead(LocalReader):  # the stream's first lines go out, then the database fails over
        def new_entries(self, job_id, attempt):
            yield from super().new_entries(job_id, attempt)
            database.down = True

    client = create_app(zen.config, database, local_identity("alice"), reader_factory=lambda: FailoverAfterRead(logs),
                        clock=clock, output_timing=(0.01, 0.1)).test_client()
    stream = client.get("/jobs/a1/output").get_data(as_text=True)
    assert "step one" in stream and "event: end" not in stream  # ended, for the browser to come back


def test_a_reconnect_after_the_next_attempts_first_line_still_gets_the_earlier_attempts_tail(setup, clock, monkeypatch):
    """Cloud Logging's reader reads an attempt ``READ_PAGES`` pages a call: attempt 1's first pages went out, then
    attempt 2's lines, and the stream's id named attempt 2; the browser reconnecting then (a dropped connection, or
    the stream's 5 minutes up during a long attempt 1) counted attempt 1 as sent whole: its last lines never showed."""
    zen, functions, _, _ = setup
    functions.submit(job_request("p1", user_id="alice"))
    for attempt, final in ((1, "PREEMPTED"), (2, "SUCCEEDED")):
        for beat in agent_run("p1", attempt=attempt, vm=f"vm-{attempt}", final=final):
            functions.heartbeat(beat)
            clock.advance(5)
    client = AttemptsClient()
    longest = cloud_logging.READ_PAGES + 3  # one entry a page: more than one read
    for seq in range(1, longest + 1):
        client.add(1, seq, final=seq == longest)
    client.add(2, 1, final=True)
    monkeypatch.setattr(cloud_logging, "REQUEST_INTERVAL_S", 0)
    app = create_app(zen.config, zen.db, local_identity("alice"), output_timing=(0.01, 0.3), clock=clock,
                     reader_factory=lambda: cloud_logging.CloudReader(client, "p", page_size=1))
    answer = app.test_client().get("/jobs/p1/output", buffered=False)
    texts, last_id = [], None
    for chunk in answer.response:  # the browser, until attempt 2's first line; then its connection drops
        text = chunk.decode() if isinstance(chunk, bytes) else chunk
        for found in re.finditer(r"id: (.+)\nevent: line\ndata: (.+)\n", text):
            last_id = found.group(1)
            texts.append(json.loads(found.group(2))["text"])
        if "a2 line 1" in texts:
            break
    answer.close()
    _, rest = _streamed(zen, clock, lambda: cloud_logging.CloudReader(client, "p", page_size=1), "p1", last_id, 0.3)
    assert texts + rest == [f"a1 line {n}" for n in range(1, longest + 1)] + ["a2 line 1"], (texts, rest)
