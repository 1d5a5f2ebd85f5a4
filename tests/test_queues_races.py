"""Admission passes racing a change that holds a job's row (zen.jobs.queueing; rows another transaction holds are
skipped, never waited for): the outcome is one of the serial orders' of the two messages.

- A preemption pass whose cheapest victim is held by its own final report or its user's stop preempted the next
  cheapest job instead: a dearer job stopped and rerun for nothing (in either serial order it runs on).
- A pass that read a lender queue's line as empty (its head held by a stop being applied) let a borrower take
  the quota that lender's next job is owed (serially the lender's job gets it, the borrower waits)."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager

import pytest

from tests.messages import agent_run, job_request
from tests.test_queues import COHORT, CLUSTER, queued_zen, run_until_running, statuses  # noqa: F401 - fixture
from zen.core import eventarc
from zen.core.events import PUBSUB_EVENT_TYPE

PREEMPTING = [{"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"], "preemption": "lower-priority"}]


def _deliver(zen, handler, topic, payload, message_id):
    data = eventarc.pubsub_cloud_event(json.dumps(payload).encode(), message_id=message_id, topic=topic,
                                       project=zen.config.project)["data"]
    return handler(message_id, PUBSUB_EVENT_TYPE, data)


@contextmanager
def in_flight(zen, hook: str, handler, topic: str, payload: dict, message_id: str, after: bool = False):
    """``payload`` delivered to ``handler`` in a thread of its own, paused at the store's ``hook`` (before it; after
    it with ``after``) with its transaction open: the body runs meanwhile, then it goes on and commits."""
    mine: list[threading.Thread] = []
    holding, go_on, errors = threading.Event(), threading.Event(), []

    def pause(*_):
        if threading.current_thread() in mine and not holding.is_set():
            holding.set()
            assert go_on.wait(30)

    (zen.store.hooks.after if after else zen.store.hooks.before)(hook, pause)

    def deliver():
        try:
            _deliver(zen, handler, topic, payload, message_id)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    mine.append(threading.Thread(target=deliver))
    mine[0].start()
    assert holding.wait(30)
    try:
        yield
    finally:
        go_on.set()
        mine[0].join(30)
    assert not errors, errors


def _two_running(functions, clock):
    functions.submit(job_request("L1", priority=0))
    clock.advance(1)
    functions.submit(job_request("L2", priority=5))
    run_until_running(functions, "L1", "vm-1")
    run_until_running(functions, "L2", "vm-2")


def _urgent(zen, clock):
    clock.advance(1)
    _deliver(zen, zen.on_job_submitted, zen.config.topics.job_submitted, job_request("H", priority=9), "submit-H")


@pytest.mark.queues(PREEMPTING)
def test_a_final_report_in_flight_does_not_make_the_pass_preempt_a_dearer_job(queued_zen, clock):
    """L1's final report holds its row (its commit not yet made) as the urgent job's pass looks for a victim: in
    either serial order L2 (priority 5) runs on; it was preempted because the cheaper L1 was busy ending."""
    zen, functions = queued_zen
    _two_running(functions, clock)
    final = agent_run("L1", vm="vm-1")[-1]  # SUCCEEDED: its row written, about to run its queue's pass
    with in_flight(zen, "queue_lock", zen.on_heartbeat, zen.config.topics.heartbeats, final, "final-L1"):
        _urgent(zen, clock)
    assert statuses(zen, "L1", "H", "L2") == ["SUCCEEDED", "QUEUED", "RUNNING"]


@pytest.mark.queues(PREEMPTING)
def test_a_users_stop_in_flight_does_not_cost_a_second_victim(queued_zen, clock):
    """The same with a user's stop of the cheapest job in flight: in either serial order only L1 stops (stop
    first: its quota is on its way back and the pass preempts nothing, docs/how-to/queues.md; pass first: L1 is
    the victim and the user's stop wins). Concurrently L2 was preempted as well: two jobs stopped for one."""
    zen, functions = queued_zen
    _two_running(functions, clock)
    with in_flight(zen, "save_job", zen.on_stop_requested, zen.config.topics.job_stop,
                   {"job_id": "L1", "reason": "not needed"}, "stop-L1", after=True):  # L1 written STOPPING
        _urgent(zen, clock)
    assert statuses(zen, "L1", "H", "L2") == ["STOPPING", "PENDING", "RUNNING"]


def _setup(functions, clock):
    for n in range(4):  # team-a runs 16 GPUs: its own 8 and team-b's 8
        functions.submit(job_request(f"a{n}"))
        clock.advance(1)
        run_until_running(functions, f"a{n}", f"vm-{n}")
    for job_id in ("b1", "b2"):  # team-b's own quota, lent: they wait for it back
        functions.submit(job_request(job_id, user_id="bob"))
        clock.advance(1)
    functions.submit(job_request("a4"))  # team-a wants more: it would borrow
    clock.advance(1)


@pytest.mark.queues(COHORT)
@pytest.mark.parametrize("first", ["stop", "final"])
def test_serially_the_lenders_next_job_gets_the_freed_quota(queued_zen, clock, first):
    zen, functions = queued_zen
    _setup(functions, clock)
    assert statuses(zen, "b1", "b2", "a4") == ["PENDING", "PENDING", "PENDING"]
    steps = [lambda: functions.stop({"job_id": "b1", "reason": "not this one"}, ),
             lambda: functions.heartbeat(agent_run("a0", vm="vm-0")[-1])]
    for step in steps if first == "stop" else steps[::-1]:
        step()
    assert statuses(zen, "b1", "b2", "a4") == ["CANCELLED", "QUEUED", "PENDING"]


@pytest.mark.queues(COHORT)
def test_a_stop_in_flight_of_the_lenders_head_does_not_let_a_borrower_take_its_quota(queued_zen, clock):
    zen, functions = queued_zen
    _setup(functions, clock)
    with in_flight(zen, "queue_lock", zen.on_stop_requested, zen.config.topics.job_stop,
                   {"job_id": "b1", "reason": "not this one"}, "stop-b1"):  # b1 written CANCELLED, not committed
        _deliver(zen, zen.on_heartbeat, zen.config.topics.heartbeats, agent_run("a0", vm="vm-0")[-1], "final-a0")
    assert statuses(zen, "a0", "b1") == ["SUCCEEDED", "CANCELLED"]
    assert statuses(zen, "b2", "a4") == ["QUEUED", "PENDING"]  # concurrently: PENDING, QUEUED (a4 borrowed)
