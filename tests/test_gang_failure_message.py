"""A gang that FAILED for node 1's exit code keeps node 1's message (its output tail), not the message of rank 0's
answer to the STOP that followed. Every final report an agent sends carries a message (``zen.agent.attempt._end``:
its note and output tail); taken as the job's whenever rank 0 reported, the job read FAILED, exit code 3, with
rank 0's SIGTERM tail (or its NCCL error) as its message."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from zen.store import repository
from tests.test_functions_lifecycle import job


def _running(functions) -> None:
    functions.submit(job_request("g", nodes=2))
    for vm, ip in (("vm-1", "10.0.0.1"), ("vm-2", "10.0.0.2")):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=ip))
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))


@pytest.mark.parametrize("answer", [dict(status="STOPPED", exit_code=-15, message="Terminated (SIGTERM)"),
                                    dict(status="FAILED", exit_code=1, message="NCCL error: peer closed")])
def test_a_gangs_failure_message_is_the_failed_nodes_not_rank_0s_answer(functions, zen, clock, answer):
    _running(functions)
    clock.advance(5)
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-2", exit_code=3, message="CUDA out of memory"))
    clock.advance(5)
    functions.heartbeat(heartbeat("g", answer.pop("status"), 4, vm="vm-1", **answer))
    record = job(zen, "g")
    assert (record.status.value, record.exit_code) == ("FAILED", 3)
    assert record.message == "node 1: CUDA out of memory", record.message


OOM = ("zen: killed: out of memory (exit code 137): the job's container reached its memory limit, 80.0 GiB (its share "
       "of the VM's memory; its files in /tmp and /dev/shm count), or the VM ran out of memory; make the job use less\n"
       "Traceback (most recent call last): ...")


def _node_killed(functions, clock, **request) -> None:
    functions.submit(job_request("g", nodes=2, **request))
    for vm, ip in (("vm-1", "10.0.0.1"), ("vm-2", "10.0.0.2")):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=ip))
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))
    clock.advance(5)
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-2", exit_code=137, message=OOM))
    clock.advance(5)
    functions.heartbeat(heartbeat("g", "STOPPED", 4, vm="vm-1", exit_code=-15, message="Terminated (SIGTERM)"))


def _notes(zen) -> list[str]:
    with zen.db.transaction() as session:
        return [row["reason"] or "" for row in repository.job_history(session, "g")]


def test_a_node_killed_for_want_of_memory_is_said_so_in_the_gangs_history(functions, zen, clock):
    """As a one-VM job's (``zen explain``): the node's end in words, not its exit code alone, both where the other
    nodes are stopped and where the gang is FAILED."""
    _node_killed(functions, clock)
    assert job(zen, "g").status.value == "FAILED"
    notes = _notes(zen)
    assert any(n.startswith("node 1 (vm-2) failed: killed: out of memory (exit code 137); the other nodes are stopped")
               for n in notes), notes
    assert notes[-1] == "node 1 (vm-2) failed: killed: out of memory (exit code 137)", notes


def test_a_gangs_retry_after_a_node_killed_for_want_of_memory_says_so(functions, zen, clock):
    _node_killed(functions, clock, max_retries=1)
    assert job(zen, "g").status.value == "PENDING"
    assert _notes(zen)[-1].startswith("node 1 (vm-2): attempt 1 was killed: out of memory (exit code 137): retry 1 of 1"), \
        _notes(zen)
