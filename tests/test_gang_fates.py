"""A gang's fate when its nodes' reports cross a stop or a loss, through the functions and Postgres: the
outcome a one-VM job would have (a gang whose every node exited 0 as its stop came succeeded), and no
next attempt running beside a node of the last one."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import controls, job
from zen.core import gang


def _running(functions, job_id: str = "g") -> None:
    functions.submit(job_request(job_id, nodes=2))
    for vm, ip in (("vm-1", "10.0.0.1"), ("vm-2", "10.0.0.2")):
        functions.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=vm, ip=ip))
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat(job_id, "RUNNING", 2, vm=vm))


def _both_exit_0(functions) -> None:
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm=vm, exit_code=0))


def test_a_gang_whose_nodes_all_exit_0_as_a_users_stop_comes_succeeded(functions, zen):
    _running(functions)
    functions.stop({"job_id": "g", "reason": "done early"})
    _both_exit_0(functions)
    record = job(zen, "g")
    assert (record.status.value, record.exit_code, record.attempt) == ("SUCCEEDED", 0, 1)  # was CANCELLED


def test_a_gang_that_finished_as_its_queue_took_it_back_is_not_run_again(functions, zen, clock):
    _running(functions)
    with zen.jobs._store.transaction() as tx:
        current = tx.get_job("g", lock=True)
        zen.jobs.decisions.apply(tx, current, gang.decide_preempt(current, "queue prod needs its quota", clock()),
                                 actor="admission", now=clock(), admit=False)
    assert job(zen, "g").status.value == "STOPPING"
    _both_exit_0(functions)
    record = job(zen, "g")
    assert (record.status.value, record.attempt) == ("SUCCEEDED", 1)  # was PENDING as attempt 2: run again
