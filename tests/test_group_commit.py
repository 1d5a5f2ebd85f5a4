"""Group commit of submissions (``zen.store.submits``): concurrent deliveries share one statement and
one commit, and each gets what the one-job statement gave it, against a real Postgres."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone

import pytest

from tests.messages import job_request
from zen.core import eventarc
from zen.core.errors import DataRejected
from zen.core.events import PUBSUB_EVENT_TYPE
from zen.core.models import Job, JobStatus
from zen.jobs.outgoing import OutgoingMessage
from zen.store import repository
from zen.store.submits import GroupCommit


def submit(zen, config, request: dict, message_id: str):
    data = eventarc.pubsub_cloud_event(json.dumps(request).encode(), message_id=message_id,
                                       topic=config.topics.job_submitted, project=config.project)["data"]
    return zen.on_job_submitted(message_id, PUBSUB_EVENT_TYPE, data)


def test_concurrent_submissions_share_statements_and_each_gets_its_own_outcome(zen, config, publisher):
    """60 distinct jobs, a job submitted twice at once (one job, one start), a job_id reused by another
    request (rejected) and a job stopped before it arrived (cancelled), from 8 threads at once."""
    sizes = Counter()

    def counted(batch):
        sizes[len(batch)] += 1
        time.sleep(0.005)  # a slower database: deliveries pile up behind the statement in flight

    zen.store.hooks.before("submit_jobs", counted)
    zen.on_stop_requested("stop-early", PUBSUB_EVENT_TYPE, eventarc.pubsub_cloud_event(
        json.dumps({"job_id": "early", "reason": "changed my mind"}).encode(), message_id="stop-early",
        topic=config.topics.job_stop, project=config.project)["data"])
    work = [(job_request(f"g-{n}"), f"m-{n}") for n in range(60)]
    work += [(job_request("twice"), "twice-1"), (job_request("twice"), "twice-2")]
    work += [(job_request("reused"), "reused-1"), (job_request("reused", command=["other"]), "reused-2")]
    work += [(job_request("early"), "early-1")]
    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(lambda w: submit(zen, config, *w), work))

    assert max(sizes) > 1, sizes  # deliveries did share statements
    results = Counter((o.job_id, o.result) for o in outcomes)
    assert all(results[(f"g-{n}", "created")] == 1 for n in range(60))
    assert results[("twice", "created")] == 1 and results[("twice", "duplicate")] == 1
    assert results[("reused", "created")] == 1 and results[("reused", "rejected")] == 1
    with zen.db.transaction() as session:
        for n in range(60):
            job = repository.get_job(session, f"g-{n}")
            assert job.status is JobStatus.QUEUED
            history = [(r["from_status"], r["to_status"]) for r in repository.job_history(session, f"g-{n}")]
            assert history == [(None, "PENDING"), ("PENDING", "QUEUED")]
        assert repository.get_job(session, "early").status is JobStatus.CANCELLED
        assert repository.get_job(session, "twice").status is JobStatus.QUEUED
    starts = Counter(m.attributes["job_id"] for m in publisher.on("zen-job-start"))
    assert all(starts[f"g-{n}"] == 1 for n in range(60))
    assert starts["twice"] == 1 and starts["reused"] == 1 and starts["early"] == 0


def _queued(job_id: str, **changes) -> Job:
    now = datetime.now(timezone.utc)
    job = Job(job_id=job_id, status=JobStatus.QUEUED, attempt=1, max_attempts=3, cluster="4xa100-40gb",
              user_id="alice", priority=0, regions=["us-central1"], request={"job_id": job_id, "command": ["true"]},
              request_hash="h", max_runtime_s=None, region=None, zone=None, vm=None, last_seq=0,
              last_heartbeat_at=None, submitted_at=now, queued_at=now, started_at=None, finished_at=None,
              exit_code=None, message=None, updated_at=now, gpus=4)
    return job.model_copy(update=changes)


HISTORY = [{"actor": "user:alice", "from_status": None, "to_status": "PENDING", "reason": "submitted"}]


class Writer:
    """``GroupCommit.write`` from threads, each job's result (or error) kept by job_id."""

    def __init__(self, commit: GroupCommit):
        self.commit, self.results = commit, {}
        self.now = datetime.now(timezone.utc)

    def write(self, job: Job) -> None:
        try:
            self.results[job.job_id] = self.commit.write(job, HISTORY, [OutgoingMessage("t", job.job_id.encode())],
                                                         self.now)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            self.results[job.job_id] = exc

    def start(self, job: Job) -> threading.Thread:
        thread = threading.Thread(target=self.write, args=(job,))
        thread.start()
        return thread


@contextmanager
def held_statement(db, writer: Writer):
    """A statement in flight that does not end: the job 'held', whose insert waits on a transaction that
    inserted the same job_id; that transaction rolls back when the block ends, and the statement goes on.
    Yields the thread writing 'held'."""
    with pytest.raises(RuntimeError):
        with db.transaction() as blocker:
            blocker.sql("INSERT INTO jobs (job_id, status, attempt, max_attempts, cluster, user_id, regions, "
                        "request, request_hash, submitted_at, updated_at) VALUES ('held', 'QUEUED', 1, 1, 'c', "
                        "'u', '[]', '{}', 'other', now(), now())")
            thread = writer.start(_queued("held"))
            _until(lambda: writer.commit._leading)
            yield thread
            raise RuntimeError("roll back")
    thread.join(10)


def _until(condition, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_job_the_database_refuses_fails_alone_and_its_batch_is_written(db):
    """While a statement is in flight, a good job and one Postgres refuses (priority beyond integer)
    queue up and share the next statement; it fails, and each is written again alone: the good one is
    written, the bad one gets its own error."""
    writer = Writer(GroupCommit(db))
    with held_statement(db, writer):
        later = [writer.start(job) for job in (_queued("good"), _queued("bad", priority=2**40))]
        _until(lambda: len(writer.commit._queue) == 2)
        assert len(writer.commit._queue) == 2  # both wait behind the statement in flight
    for thread in later:
        thread.join(10)
    results = writer.results
    assert [e.message.data for e in results["held"]] == [b"held"]
    assert [e.message.data for e in results["good"]] == [b"good"]
    assert isinstance(results["bad"], DataRejected)
    with db.transaction() as session:
        assert repository.get_job(session, "good").status is JobStatus.QUEUED
        assert repository.get_job(session, "bad") is None


def test_each_written_row_is_handed_to_the_relay_once_before_its_caller_returns(db):
    """``committed`` (the relay) gets the rows of each statement once, in the thread that wrote it, before
    the callers return (their requests keep the instance's CPU meanwhile); rows written again alone after
    a refused batch are handed over too, and a job written by nobody hands over nothing."""
    handed, returned_after = [], {}
    writer = Writer(GroupCommit(db, lambda rows: handed.append([e.message.data for e in rows])))
    write = writer.write

    def write_and_look(job: Job) -> None:
        write(job)
        returned_after[job.job_id] = any(job.job_id.encode() in rows for rows in handed)
    writer.write = write_and_look
    with held_statement(db, writer):
        later = [writer.start(job) for job in (_queued("good"), _queued("bad", priority=2**40))]
        _until(lambda: len(writer.commit._queue) == 2)
    for thread in later:
        thread.join(10)
    ok = [writer.start(_queued(f"ok-{n}")) for n in range(6)]
    for thread in ok:
        thread.join(10)
    assert sorted(sum(handed, [])) == sorted([b"held", b"good"] + [f"ok-{n}".encode() for n in range(6)])  # once each
    assert returned_after == {**{j: True for j in ["held", "good"] + [f"ok-{n}" for n in range(6)]}, "bad": False}


def test_a_statement_that_does_not_end_holds_up_its_own_batch_only(db):
    """A job submitted while the leader's statement waits on a lock leaves the queue after ``wait_s``
    and is written alone, instead of waiting for the lock."""
    writer = Writer(GroupCommit(db))
    writer.commit.wait_s = 0.2
    with held_statement(db, writer):
        began = time.monotonic()
        writer.start(_queued("unrelated")).join(5)  # written while the blocker still holds its lock
        waited = time.monotonic() - began
        assert [e.message.data for e in writer.results.get("unrelated", ())] == [b"unrelated"]
        assert "held" not in writer.results  # still waiting on the lock
    assert 0.2 <= waited < 5
    assert [e.message.data for e in writer.results["held"]] == [b"held"]


def test_when_postgres_is_unreachable_every_caller_of_the_batch_raises_a_transient_error(db_target):
    """A batch whose connection cannot be made: each caller raises TransientError (Pub/Sub redelivers),
    none waits for ever or writes alone."""
    from zen.core.errors import TransientError
    from zen.store.db import Database

    def unreachable():
        time.sleep(0.3)  # callers queue behind the leader meanwhile
        raise OSError("connection refused")

    commit = GroupCommit(Database(unreachable))
    now = datetime.now(timezone.utc)
    errors: dict[str, object] = {}

    def write(job_id: str) -> None:
        try:
            commit.write(_queued(job_id), HISTORY, [OutgoingMessage("t", b"x")], now)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            errors[job_id] = exc

    threads = [threading.Thread(target=write, args=(f"u-{n}",)) for n in range(5)]
    for thread in threads:
        thread.start()
        time.sleep(0.02)
    for thread in threads:
        thread.join(10)
    assert sorted(errors) == [f"u-{n}" for n in range(5)]
    assert all(isinstance(e, TransientError) for e in errors.values()), errors
