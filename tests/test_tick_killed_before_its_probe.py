"""A scale tick's function instance killed (out of memory, a scale-in) after its sweep transaction committed and
before it published the probe of the heartbeat path that transaction kept as sent (``zen.jobs.probes``): nothing
ever came through for that probe. The next ticks held every silence where the last probe heard left it for two
heartbeat timeouts, then replaced it, and its replacement, heard while it was outstanding, read as a path stalled
two timeouts, so every silence counted afresh from then: a job whose VM had died was rerun minutes late, and so
would every other job whose VM died meanwhile. The probe is published before the transaction that keeps it commits
(``zen.jobs.probes.send``): killed before the commit, no tick's probe has its nonce, and heard it is none."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from typing import Sequence

import pytest

from tests.messages import heartbeat, job_request
from tests.test_tick_commit_lost_probe import _hear_probes, _job
from zen.jobs.outgoing import OutgoingMessage
from zen.store.db import Database


class _Killed(BaseException):
    """The instance going away at this line: nothing after it runs (no ``except Exception`` sees it)."""


class _KilledAtProbe:
    """The instance's publisher: the process is killed as it comes to publish a probe."""

    def __init__(self, real):
        self._real = real

    def publish(self, messages: Sequence[OutgoingMessage]) -> list[str | Exception]:
        if any(m.attributes.get("kind") == "probe" for m in messages):
            raise _Killed()
        return self._real.publish(messages)

    def publish_soon(self, messages, done, *, linger_s: float = 0.0) -> None:
        done(self.publish(messages))


def test_a_tick_killed_at_its_probe_still_lets_the_sweep_find_a_dead_vm(
        functions, zen, publisher, clock, db_target, config):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))  # t=0: vm-a's last report; then it dies
    functions.tick()
    seen = _hear_probes(functions, publisher, 0)

    from zen.app import Zen

    other_db = Database(db_target.connect)  # another function instance, killed in the middle of its tick
    try:
        other = Zen(config, other_db, _KilledAtProbe(publisher), clock)
        clock.advance(60)
        with pytest.raises(_Killed):
            other.on_scale_tick()
    finally:
        other_db.close()  # its connections end with the process
    seen = _hear_probes(functions, publisher, seen)

    for _ in range(3):  # t=120 .. 240: vm-a silent past the timeout, the heartbeat path prompt all along
        clock.advance(60)
        functions.tick()
        seen = _hear_probes(functions, publisher, seen)
    assert _job(zen) == ("QUEUED", 2)


class _HeardAtOnce:
    """The tick's publisher, the heartbeat path as prompt as it gets: a probe is handled by the heartbeat function
    (in another thread, as another instance would) before the tick's transaction that keeps it has committed."""

    def __init__(self, real, functions, db):
        self._real, self._functions, self._db = real, functions, db
        self.hearing: list[threading.Thread] = []
        self.outcomes: list = []

    def publish(self, messages: Sequence[OutgoingMessage]) -> list[str | Exception]:
        results = self._real.publish(messages)
        for message in messages:
            if message.attributes.get("kind") == "probe":
                hearing = threading.Thread(target=self._hear, args=(json.loads(message.data),))
                hearing.start()
                self.hearing.append(hearing)
                for _ in range(3000):  # until handled, or waiting for the commit (at most 30 s)
                    if not hearing.is_alive() or self._waiting_on_a_lock():
                        break
                    hearing.join(0.01)
        return results

    def _hear(self, probe: dict) -> None:
        self.outcomes.append(self._functions.heartbeat(probe))

    def _waiting_on_a_lock(self) -> bool:
        with self._db.session() as session:
            return bool(session.sql("SELECT 1 FROM pg_locks WHERE NOT granted AND pid <> pg_backend_pid()"))

    def publish_soon(self, messages, done, *, linger_s: float = 0.0) -> None:
        done(self.publish(messages))


def test_a_probe_heard_before_its_tick_commits_vouches_for_the_path(functions, zen, publisher, db_target, clock,
                                                                  config):
    from zen.app import Zen

    functions.tick()  # the first: tick_clock's row made
    _hear_probes(functions, publisher, 0)
    clock.advance(60)
    ticker_db = Database(db_target.connect)  # the tick's instance
    try:
        ticker_publisher = _HeardAtOnce(publisher, functions, zen.db)
        ticker = Zen(config, ticker_db, ticker_publisher, clock)
        ticker.on_scale_tick()
        for hearing in ticker_publisher.hearing:
            hearing.join(10)
    finally:
        ticker_db.close()
    assert len(ticker_publisher.hearing) == 1, ticker_publisher.outcomes
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT probe_nonce, probe_heard_at FROM tick_clock")
    assert row["probe_nonce"] is not None and row["probe_heard_at"] is not None  # heard: the path is vouched for


def test_the_heartbeat_functions_role_may_wait_for_the_ticks_commit(db, db_target):
    """``lock_tick_clock`` and ``probe_heard`` as the heartbeat function's role alone: its grants allow them."""
    import os

    from tests.role_support import login_as

    with login_as(db, db_target, "zen_heartbeat", f"zen_heartbeat_lock_{os.getpid()}") as target:
        beat = Database(target.connect)
        try:
            with beat.transaction() as session:
                session.run("lock_tick_clock")
                session.run("probe_heard", nonce="0" * 32, now=datetime.now(timezone.utc))
        finally:
            beat.close()
