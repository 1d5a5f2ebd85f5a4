"""A scale tick whose sweep transaction committed but whose connection dropped before Postgres' answer came (a Cloud
SQL failover; ``tests.commit_lost_proxy`` loses the answer for real) kept the probe of the heartbeat path it chose
(``zen.jobs.probes``) as sent, and raised before publishing it. Nothing ever came through for it: the next ticks
held every silence where the last probe heard left it for two heartbeat timeouts, then replaced it, and its
replacement, heard while it was outstanding, read as a path stalled two timeouts, so every silence counted afresh
from then. A job whose VM had died was taken for lost at t=540 s instead of t=240 s (heartbeat_timeout_s 120),
rerun five minutes late, and so would every other job whose VM died meanwhile. The probe the commit may have kept
is published all the same: were the commit not applied, no tick's probe has its nonce, and it is heard as none."""

from __future__ import annotations

import json

import pytest

from tests.commit_lost_proxy import CommitLostProxy
from tests.messages import heartbeat, job_request
from zen.core.errors import TransientError
from zen.store import repository
from zen.store.db import Database


def _job(zen, job_id="job-1"):
    with zen.db.transaction() as session:
        job = repository.get_job(session, job_id)
    return job.status.value, job.attempt


def _hear_probes(functions, publisher, seen: int) -> int:
    """Deliver the probes published on zen-heartbeats since ``seen`` messages (the path is prompt)."""
    messages = publisher.on("zen-heartbeats")
    for message in messages[seen:]:
        if json.loads(message.data).get("kind") == "probe":
            functions.heartbeat(json.loads(message.data))
    return len(messages)


def test_a_tick_whose_commit_answer_was_lost_still_lets_the_sweep_find_a_dead_vm(
        functions, zen, publisher, clock, db_target, config):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))  # t=0: vm-a's last report; then it dies
    functions.tick()
    seen = _hear_probes(functions, publisher, 0)

    from zen.app import Zen

    proxy = CommitLostProxy(db_target)
    other_db = Database(proxy.target.connect)  # another function instance, its link to Postgres about to drop
    try:
        other = Zen(config, other_db, publisher, clock)
        proxy.marker = b"probe_prev_nonce"  # the sweep's look at its probe: its transaction's COMMIT is lost
        clock.advance(60)
        with pytest.raises(TransientError):
            other.on_scale_tick()
        with other.relay.request():
            pass
    finally:
        other_db.close()
        proxy.close()
    assert proxy.lost == 1  # committed, never told
    seen = _hear_probes(functions, publisher, seen)

    for _ in range(3):  # t=120 .. 240: vm-a silent past the timeout, the heartbeat path prompt all along
        clock.advance(60)
        functions.tick()
        seen = _hear_probes(functions, publisher, seen)
    assert _job(zen) == ("QUEUED", 2)
