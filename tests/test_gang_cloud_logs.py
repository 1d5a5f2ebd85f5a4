"""`zen logs -f` of a multi-node job read from Cloud Logging (zen.adapters.cloud_logging.CloudReader): an attempt
is over (never listed again) once every node's final entry is read, as many as the job has nodes. Counted among the
VMs heard so far, a node that had printed nothing yet when another node's final entry was read twice (still staging
its inputs, or its lines late) was never read: `zen logs -f` and the console showed one node's output. And
`zen logs -f --node K` ends at that node's final entry, not after the settle time."""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from zen.adapters import cloud_logging as joblogs_cloud
from zen.cli.follow import follow
from zen.core.models import JobStatus

from tests.test_cloud_reader import unread


class Client:
    """Lists as the service does (oldest first, the reader's seq filters applied)."""

    def __init__(self):
        self.items = []

    def add(self, vm: str, seq: int, text: str, final: bool = False):
        self.items.append(SimpleNamespace(labels={"job_id": "g", "attempt": "1", "stream": "stdout", "vm": vm},
                                          payload={"message": text, "seq": seq, "final": final},
                                          timestamp=datetime(2026, 11, 24, tzinfo=timezone.utc)
                                          + timedelta(milliseconds=len(self.items))))

    def list_entries(self, resource_names, filter_, order_by, page_size):
        fresh = unread(filter_)
        yield from [item for item in self.items if fresh(item)]


class Ticks:
    """A clock one second later at each read."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


class Known:
    """Job status for ``follow``: the job was never refused."""

    def rejection(self, job_id, message_id=None):
        return None


def test_a_node_that_speaks_after_the_other_nodes_final_was_read_twice_is_still_read(monkeypatch):
    monkeypatch.setattr(joblogs_cloud, "REQUEST_INTERVAL_S", 0, raising=False)
    client = Client()
    client.add("vm-1", 1, "rank 0: bad config, exiting")
    client.add("vm-1", 2, "[zen] end of attempt 1 on vm-1: FAILED, exit code 1", final=True)
    reader = joblogs_cloud.CloudReader(client, "p")
    reader.expect_nodes(2)  # what `zen logs -f` and the console tell it from the job
    assert [e.text for e in reader.new_entries("g", 1)][0] == "rank 0: bad config, exiting"
    assert reader.new_entries("g", 1) == []  # `zen logs -f` polls again: nothing new yet
    # vm-2 was still staging its inputs; it is stopped with its gang and ships its lines and final entry.
    client.add("vm-2", 1, "rank 1: staged, starting")
    client.add("vm-2", 2, "[zen] end of attempt 1 on vm-2: STOPPED, exit code 143", final=True)
    assert [e.text for e in reader.new_entries("g", 1)] == [
        "rank 1: staged, starting", "[zen] end of attempt 1 on vm-2: STOPPED, exit code 143"]


def test_zen_logs_follow_of_a_gang_shows_every_nodes_lines(monkeypatch):
    monkeypatch.setattr(joblogs_cloud, "REQUEST_INTERVAL_S", 0, raising=False)
    client = Client()
    client.add("vm-1", 1, "rank 0: bad config, exiting")
    client.add("vm-1", 2, "[zen] end of attempt 1 on vm-1: FAILED, exit code 1", final=True)
    polls = [0]

    class Status(Known):
        def job(self, job_id):
            polls[0] += 1
            if polls[0] == 3:  # vm-2 speaks after two reads of vm-1's final entry
                client.add("vm-2", 1, "rank 1: staged, starting")
                client.add("vm-2", 2, "[zen] end of attempt 1 on vm-2: STOPPED, exit code 143", final=True)
            status = JobStatus.RUNNING if polls[0] < 4 else JobStatus.FAILED
            return SimpleNamespace(status=status, attempt=1, nodes=2, vm="vm-1", started_at=1, exit_code=1,
                                   request_hash=None)

    clock = Ticks()
    out = io.StringIO()
    code = follow("g", joblogs_cloud.CloudReader(client, "p"), Status(), style="raw", out=out, err=io.StringIO(),
                  poll_s=0.0, settle_s=5.0, clock=clock)
    assert code == 1
    assert "rank 1: staged, starting" in out.getvalue(), out.getvalue()


def test_follow_of_one_node_ends_at_that_nodes_final_entry_not_after_the_settle_time():
    """`zen logs -f --node K` (zen.cli.follow.OneNode) reads node K's lines alone: its attempt is read to its end at
    that node's final entry (counted to the job's nodes, every `--node -f` waited the whole settle time, 30 s from
    Cloud Logging, after the job ended)."""
    from zen.adapters.joblogs import OutputEntry
    from zen.cli.follow import OneNode

    class Reader:
        def __init__(self):
            self.batches = [[OutputEntry("g", 1, "stdout", "vm-1", 1, "", "rank 0"),
                             OutputEntry("g", 1, "zen", "vm-1", 2, "", "[zen] end", final=True),
                             OutputEntry("g", 1, "stdout", "vm-2", 1, "", "rank 1"),
                             OutputEntry("g", 1, "zen", "vm-2", 2, "", "[zen] end", final=True)]]

        def new_entries(self, job_id, attempt=None):
            return self.batches.pop(0) if self.batches else []

    class Status(Known):
        def job(self, job_id):
            return SimpleNamespace(status=JobStatus.SUCCEEDED, attempt=1,
                                   nodes=2, vm="vm-1", started_at=1, exit_code=0, request_hash=None)

    clock = Ticks()
    code = follow("g", OneNode(Reader(), "vm-2"), Status(), style="raw", out=io.StringIO(), err=io.StringIO(),
                  poll_s=0.0, settle_s=30.0, clock=clock)
    assert code == 0
    assert clock.now < 10, f"followed {clock.now:g} clock reads past node 1's final entry"
