"""A scale tick whose scaling step stands in slow Compute calls (many clusters and regions, a region's API
answering each call just within its bound) keeps sweeping beside it (``Zen.on_scale_tick``,
``zen.jobs.beside``). Ticks run one at a time (one instance, one request at once, the tick lock): the lost-job
sweep, the stops' deadlines and the start republish ran once a tick, before its scaling step, so while each tick's
scaling step took minutes, a job whose VM had died was requeued minutes late (and the sweep, seeing its ticks
minutes apart, took the wait for an outage of Zen's and counted every silence afresh: later still), a STOPPING job
whose VM was gone stayed STOPPING as long. Against the Compute stand-in, through the official client."""

from __future__ import annotations

import threading
import time

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import build_stack
from zen.core.errors import TransientError
from zen.jobs.beside import sweeping_beside
from zen_dev.local.compute.faults import Outages

STEP_S = 30  # Zen's clock moves on this much a sweep while the Compute call stands still: no gap in the ticks
WAIT_S = 20.0  # the most (real seconds) the stand-in's call stands still: it ends once the job is requeued


def status(zen, job_id: str) -> tuple[str, int]:
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT status, attempt FROM jobs WHERE job_id = :id", id=job_id)
    return row["status"], row["attempt"]


class SlowCompute(Outages):
    """The stand-in's fault seam, asked before each call it answers: the first call of the armed tick stands still
    (minutes of slow answers, each within its bound) until ``job_id`` is requeued, or ``WAIT_S``; Zen's clock moves
    on ``STEP_S`` at a time, each step once a sweep has run since the last (or the wait is over). What the call saw
    at its end is kept."""

    def __init__(self, zen, clock, job_id: str):
        super().__init__([])
        self._zen, self._clock, self._job_id = zen, clock, job_id
        self._armed = threading.Event()
        self.sweeps = 0
        self.seen: list[tuple[str, int]] = []
        zen.store.hooks.after("held_jobs_silent_since", self._swept)

    def _swept(self, result, *args, **kwargs) -> None:
        self.sweeps += 1

    def arm(self) -> None:
        self._armed.set()

    def check(self, method, region, t) -> None:
        if not self._armed.is_set():
            return
        self._armed.clear()  # the first call only: the others answer at once
        give_up = time.monotonic() + WAIT_S
        while (now := status(self._zen, self._job_id))[0] != "QUEUED" and time.monotonic() < give_up:
            swept = self.sweeps
            self._clock.advance(STEP_S)
            while self.sweeps == swept and time.monotonic() < give_up:
                time.sleep(0.01)
        self.seen.append(now)


def test_a_job_whose_vm_died_is_requeued_while_the_tick_waits_on_slow_compute(config, db, publisher, clock,
                                                                                monkeypatch, tmp_path):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, _, _, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path)
    try:
        fn = FunctionsInvoker(zen)
        zen.sweep_every_s = 0.01  # the period beside a scaling step (a minute deployed), on the test's clock
        fn.submit(job_request("dead"))
        fn.heartbeat(heartbeat("dead", "CLAIMED", 1, vm="vm-d"))
        fn.tick()
        clock.advance(60)  # the next tick, a minute later
        fn.heartbeat(heartbeat("dead", "RUNNING", 2, vm="vm-d"))  # its last word: its VM dies after it
        slow = standin.api.outages = SlowCompute(zen, clock, "dead")
        slow.arm()
        fn.tick()  # its sweep first (the job heard from just now), then its scaling step, in slow Compute calls
        assert slow.seen == [("QUEUED", 2)]  # requeued while the scaling step still waited on Compute
        assert status(zen, "dead") == ("QUEUED", 2)
    finally:
        standin.stop()


def test_a_failed_sweep_beside_is_followed_by_the_next():
    tried, twice = [], threading.Event()

    def sweep():
        tried.append(1)
        if len(tried) == 2:
            twice.set()
        raise TransientError("Postgres is restarting")

    with sweeping_beside(sweep, 0.001, lambda: False):
        assert twice.wait(10)


def test_no_sweep_beside_a_tick_past_its_timeout():
    """Cloud Functions answered 504: the next tick sweeps, not this one's thread once it gets the CPU again."""
    tried, asked = [], threading.Event()

    def past_timeout() -> bool:
        asked.set()
        return True

    with sweeping_beside(lambda: tried.append(1), 0.001, past_timeout):
        assert asked.wait(10)
    assert tried == []
