"""A scale tick cut at its function's timeout (``ZEN_FUNCTION_TIMEOUT_S``), on the real Postgres and through
functions-framework. Cloud Functions answers 504 at the timeout and leaves the instance running, throttled: the
tick's thread stands still wherever it was, the connection holding its session-level advisory lock stays open, and
so does a transaction it was in. Postgres ends both once idle for the timeout (``idle_session_timeout`` while a
session lock is held, ``idle_in_transaction_session_timeout``), so the next tick runs; the cut tick, when it runs
again, stops before its next step, or fails on its ended transaction (rolled back whole). Without them, every later
tick skipped ("another scale tick holds the lock"), or waited on the cut tick's row locks and failed, for as long as
the instance lived: no resend, no lost-job sweep, no scaling pass."""

from __future__ import annotations

import threading
import time

import pytest

from tests.messages import job_request
from zen.app import TICK_LOCK_KEY
from zen.core.errors import TransientError

TIMEOUT_S = 1  # the function's timeout here; terraform sets the tick's (240 s)


class TickCounter:
    """Zen's scaler port, counting the ticks' scaling passes; the pass of the thread named ``stalled`` stands
    still until ``thaw`` (a Compute call of a throttled instance)."""

    def __init__(self):
        self.ticks = 0
        self.stalled, self.thaw = threading.Event(), threading.Event()

    def covered(self, cluster, regions=None):
        return True

    def racing(self, cluster):
        return False

    def scale(self, cluster):
        return None

    def tick(self):
        self.ticks += 1
        if threading.current_thread().name == "stalled":
            self.stalled.set()
            self.thaw.wait(30)
        return {}


@pytest.fixture
def timed(zen):
    """``zen`` whose function's timeout is ``TIMEOUT_S``, as ``Zen.from_env`` reads ``ZEN_FUNCTION_TIMEOUT_S``."""
    zen.db.close()  # connections are made with it from now on
    zen.db.lock_hold_s = TIMEOUT_S
    zen.timeout_s = TIMEOUT_S
    zen.scaler = TickCounter()
    return zen


def in_thread(zen) -> tuple[threading.Thread, dict]:
    """A tick in a thread named ``stalled``; its report or its error lands in the dict."""
    outcome: dict = {}

    def tick():
        try:
            outcome["report"] = zen.on_scale_tick()
        except Exception as exc:  # noqa: BLE001 - asserted by the caller
            outcome["error"] = exc

    thread = threading.Thread(target=tick, name="stalled")
    thread.start()
    return thread, outcome


def a_start_left_in_the_outbox(functions, publisher, job_id: str = "job-1") -> None:
    publisher.fail_next = 10  # published by the next tick that runs
    sent = len(publisher.on("zen-job-start"))
    functions.submit(job_request(job_id))
    publisher.fail_next = 0
    assert len(publisher.on("zen-job-start")) == sent


def test_a_tick_standing_still_past_its_timeout_holds_later_ticks_up_no_longer(timed, functions, publisher):
    zen, scaler = timed, timed.scaler
    cut, outcome = in_thread(zen)
    try:
        assert scaler.stalled.wait(30)  # in its scaling pass, holding the tick lock
        a_start_left_in_the_outbox(functions, publisher)
        time.sleep(TIMEOUT_S + 0.5)  # Cloud Functions answered 504; the next tick comes
        functions.tick()
        assert len(publisher.on("zen-job-start")) == 1  # resent: this tick ran, it did not skip
        assert scaler.ticks == 2
        a_start_left_in_the_outbox(functions, publisher, "job-2")
    finally:
        scaler.thaw.set()  # the cut tick's instance gets the CPU again
        cut.join(30)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["report"].cut == "final resend"  # it stopped before its next step, beside the next tick
    assert len(publisher.on("zen-job-start")) == 1
    assert not zen.on_scale_tick().skipped  # and holds nothing
    assert len(publisher.on("zen-job-start")) == 2


def test_a_tick_standing_still_in_a_transaction_holds_later_ticks_up_no_longer(timed, functions, publisher):
    """Frozen in its lost-job sweep's transaction, the tick held the tick clock's row: the next tick waited on it."""
    zen, scaler = timed, timed.scaler
    frozen, thaw = threading.Event(), threading.Event()

    def freeze(result, *args, **kwargs):
        if threading.current_thread().name == "stalled":
            frozen.set()
            thaw.wait(30)

    zen.store.hooks.after("held_jobs_silent_since", freeze)
    cut, outcome = in_thread(zen)
    try:
        assert frozen.wait(30)
        a_start_left_in_the_outbox(functions, publisher)
        time.sleep(TIMEOUT_S + 0.5)
        began = time.monotonic()
        functions.tick()
        assert time.monotonic() - began < TIMEOUT_S  # no wait on the cut tick's locks
        assert len(publisher.on("zen-job-start")) == 1
        assert scaler.ticks == 1
    finally:
        thaw.set()
        cut.join(30)
    assert isinstance(outcome.get("error"), TransientError)  # its transaction was rolled back: nothing half-written
    assert scaler.ticks == 1  # no second scaling pass beside the tick that took over
    assert not zen.on_scale_tick().skipped


def test_a_tick_within_its_timeout_keeps_the_lock(timed, db_target):
    holder = db_target.connect()  # another instance's tick, its lock taken a moment ago
    try:
        assert holder.run("SELECT pg_try_advisory_lock(:k)", k=TICK_LOCK_KEY) == [[True]]
        assert timed.on_scale_tick().skipped
        assert timed.scaler.ticks == 0
        assert holder.run("SELECT pg_advisory_unlock(:k)", k=TICK_LOCK_KEY) == [[True]]
    finally:
        holder.close()
    assert not timed.on_scale_tick().skipped


def tick_lock(db):
    return db.session_lock(lambda s: s.one_row("try_tick_lock", key=TICK_LOCK_KEY)["locked"],
                           lambda s: s.one("tick_unlock", key=TICK_LOCK_KEY))


def test_a_session_lock_goes_back_to_the_pool_without_its_hold_limit(timed):
    """The connection that held the lock goes back to the pool: idle there, it must not be ended."""
    with tick_lock(timed.db) as locked:
        assert locked
    time.sleep(TIMEOUT_S + 0.5)
    with timed.db.session() as session:
        assert session.sql("SELECT current_setting('idle_session_timeout') AS t") == [{"t": "0"}]


def test_a_lock_held_past_the_limit_is_released_by_postgres(timed):
    """Its holder, giving it back after Postgres ended the connection, gets no error: the lock went with it."""
    with tick_lock(timed.db) as locked:
        assert locked
        time.sleep(TIMEOUT_S + 0.5)
        with timed.db.session() as other:
            assert other.one_row("try_tick_lock", key=TICK_LOCK_KEY)["locked"]
            other.one("tick_unlock", key=TICK_LOCK_KEY)


def test_a_cluster_s_scaling_lock_held_past_the_limit_is_let_go(timed):
    """A scaling pass cut at its function's timeout (a submission's, a heartbeat's or the tick's): the next pass of
    its cluster runs, where every one skipped while the cut pass's instance lived."""
    from zen.scaling.fleetdb import FleetDb

    fleet = FleetDb(timed.db)
    with fleet.cluster_lock("4xa100-40gb") as cut:
        assert cut
        with fleet.cluster_lock("4xa100-40gb") as meanwhile:
            assert not meanwhile  # within the timeout, the lock holds
        time.sleep(TIMEOUT_S + 0.5)
        with fleet.cluster_lock("4xa100-40gb") as next_pass:
            assert next_pass


def test_a_scaling_pass_that_stood_still_past_its_lock_applies_nothing(timed, functions):
    """Cut at its function's timeout while it read its MIGs, a pass stood still; its cluster's lock went with its
    connection, and the next pass asked for the queued job's VM. Given the CPU again, the cut pass asked for one
    more: the target size it read again just before its resize showed the other pass's, and passed every check."""
    from tests.scaling.fakes import RecordingMig
    from zen.scaling.fleetdb import FleetDb
    from zen.scaling.manager import ClusterManager
    from zen.scaling.timing import timing_from_config

    functions.submit(job_request("job-1"))
    cluster, calls = timed.config.cluster("4xa100-40gb"), []
    migs = {region: RecordingMig(region, calls) for region in cluster.regions}
    stalled, thaw = threading.Event(), threading.Event()
    reads = migs[cluster.regions[0]].read

    def read(since=None, summary=None):
        if threading.current_thread().name == "stalled":
            stalled.set()
            thaw.wait(30)
        return reads(since, summary)

    migs[cluster.regions[0]].read = read  # type: ignore[method-assign]

    def manager():
        return ClusterManager(cluster, FleetDb(timed.db, {cluster.name: cluster}), migs, timed.clock,
                              timing_from_config(timed.config), concurrent=False)

    outcome: dict = {}
    cut = threading.Thread(target=lambda: outcome.update(report=manager().run()), name="stalled")
    cut.start()
    try:
        assert stalled.wait(30)
        time.sleep(TIMEOUT_S + 0.5)  # Cloud Functions answered 504; Postgres ends the lock's connection
        assert sum(m.target for m in migs.values()) == 0
        assert not manager().run().skipped  # the next pass: the job's VM asked for
        asked = sum(m.target for m in migs.values())
        assert asked >= 1
    finally:
        thaw.set()
        cut.join(30)
    assert sum(m.target for m in migs.values()) == asked  # the cut pass asked for none again
    assert outcome["report"].skipped and not outcome["report"].added


def test_a_lock_is_held_by_its_own_backend_not_by_one_given_its_pid_since(timed):
    """A lease asks whether its connection's backend still holds the lock by its pid and its start: a pid alone is
    reused by a later backend (a failed-over server numbers its new ones afresh), and a pass whose lock went with its
    connection read a later backend's lock, the same pid's, as its own and applied."""
    from datetime import timedelta

    from zen.store.lease import backend_holds

    with tick_lock(timed.db) as lease:
        assert lease and not lease.lost()
        with timed.db.session() as session:  # the lock's backend, as pg_stat_activity lists it
            held = session.sql("SELECT l.pid, a.backend_start FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                               " WHERE l.locktype = 'advisory' AND l.granted")
        (pid, started) = (held[0]["pid"], held[0]["backend_start"])
        assert backend_holds(timed.db.session, pid, started)
        assert not backend_holds(timed.db.session, pid, started + timedelta(seconds=1))  # another backend, same pid
