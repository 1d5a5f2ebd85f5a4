"""A job FAILED with its attempt budget spent says how many attempts it lost: only those that spent one. A gang's
attempts retried as it did not assemble, and a queue's preemptions, spend none (each raises max_attempts by one),
yet the reason counted them as lost: a gang of max_attempts 1, retried once as its assembly ran out of time and
then lost, said "2 of 2 attempts lost"; a job its queue preempted 11 times said "2 of 2 attempts lost, besides 10
preempted free". Through the functions, against a real Postgres."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from tests.test_queues import CLUSTER, queued_zen  # noqa: F401 - fixture
from zen.store import repository

WEST = dict(region="us-west1", zone="us-west1-b")


def last_reason(zen, job_id: str) -> str:
    with zen.db.transaction() as session:
        return repository.job_history(session, job_id)[-1]["reason"]


def node(functions, status: str, seq: int, vm: str, attempt: int, **extra) -> None:
    functions.heartbeat(heartbeat("g", status, seq, attempt=attempt, vm=vm, **WEST, **extra))


def test_a_gang_retried_as_it_did_not_assemble_then_lost_counts_one_attempt_lost(zen_and_fn, clock, config):
    zen, functions = zen_and_fn
    functions.submit(job_request("g", nodes=2, max_attempts=1))
    functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm="vm-1", ip="10.0.0.1"))  # the other node never comes
    clock.advance(config.gangs.assemble_s + 1)
    functions.tick()
    retried = job(zen, "g")
    assert (retried.status.value, retried.attempt, retried.max_attempts) == ("QUEUED", 2, 2)  # nothing spent
    for vm, ip in (("vm-3", "10.0.0.3"), ("vm-4", "10.0.0.4")):
        node(functions, "CLAIMED", 1, vm, 2, ip=ip)
        node(functions, "RUNNING", 2, vm, 2)
    for seq in range(3, 7):  # vm-4 goes silent, vm-3 reports on
        clock.advance(40)
        node(functions, "RUNNING", seq, "vm-3", 2)
        functions.tick()
    node(functions, "STOPPED", 8, "vm-3", 2, exit_code=-15)
    assert job(zen, "g").status.value == "FAILED"
    assert last_reason(zen, "g") == ("attempt budget spent (1 of 1 attempts lost, besides 1 retried as the gang did "
                                     "not assemble); the last: no heartbeat from node 1")


@pytest.mark.queues([{"name": "research", "quota": {CLUSTER: 4}, "users": ["alice"],
                      "preemption": "lower-priority"}])
def test_a_job_its_queue_preempted_past_ten_times_then_lost_counts_one_attempt_lost(queued_zen, clock):
    zen, functions = queued_zen
    functions.submit(job_request("low", max_attempts=1))
    for n in range(11):  # each urgent job takes the queue's quota back, and is stopped: low is admitted again
        clock.advance(1)
        functions.submit(job_request(f"urgent-{n}", priority=9))
        assert job(zen, "low").status.value == "PENDING"
        functions.stop({"job_id": f"urgent-{n}"})
        assert job(zen, "low").status.value == "QUEUED"
    taken_back = job(zen, "low")
    assert (taken_back.attempt, taken_back.max_attempts, taken_back.preemptions) == (12, 12, 11)
    for seq, status in enumerate(("CLAIMED", "RUNNING"), start=1):
        functions.heartbeat(heartbeat("low", status, seq, attempt=12, vm="vm-a"))
    for _ in range(4):  # then its VM goes silent
        clock.advance(50)
        functions.tick()
    assert job(zen, "low").status.value == "FAILED"
    assert last_reason(zen, "low") == ("attempt budget spent (1 of 1 attempts lost, besides 11 preempted free); the "
                                       "last: no heartbeat from vm-a for 120s")
