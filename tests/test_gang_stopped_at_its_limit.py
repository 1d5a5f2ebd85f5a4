"""A gang one of whose nodes the agent stopped at max_runtime_s (FAILED, over_limit): the other nodes are told
STOP, and the job ends FAILED as attempt 1 however they end: answering, silent, or taken by the cloud as they stop
(which reran it: the rerun meets the same limit). docs/explanations/delivery-guarantees.md."""
from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from tests.test_gang_fates import running
from zen.store import repository


def _timed_out_node(functions, zen):
    running(functions)
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-2", exit_code=143, over_limit="max_runtime_s",
                                  message="zen: killed after exceeding max_runtime_s=60"))
    assert job(zen, "g").status.value == "STOPPING"


def test_timed_out_gang_whose_other_node_answers_is_failed(functions, zen):
    _timed_out_node(functions, zen)
    functions.heartbeat(heartbeat("g", "STOPPED", 4, vm="vm-1", exit_code=143))
    record = job(zen, "g")
    assert (record.status.value, record.attempt) == ("FAILED", 1)


def test_timed_out_gang_whose_other_node_is_silent_is_not_rerun(functions, zen, clock, config):
    _timed_out_node(functions, zen)
    for _ in range(4):  # vm-1 never answers (hung agent, partition): past every deadline
        clock.advance(config.deadlines.heartbeat_timeout_s + config.deadlines.preempted_stop_s)
        functions.tick()
    record = job(zen, "g")
    from zen.store import repository
    with zen.db.transaction() as session:
        history = [(r["attempt"], r["to_status"], r["reason"]) for r in repository.job_history(session, "g")]
    print("\n", record.status.value, record.attempt, record.max_attempts, history)
    assert (record.status.value, record.attempt) == ("FAILED", 1), history


def test_timed_out_gang_whose_other_node_is_preempted_as_it_stops_is_not_rerun(functions, zen):
    _timed_out_node(functions, zen)
    functions.heartbeat(heartbeat("g", "PREEMPTED", 4, vm="vm-1"))  # a spot VM taken as it stopped
    record = job(zen, "g")
    from zen.store import repository
    with zen.db.transaction() as session:
        history = [(r["attempt"], r["to_status"], r["reason"]) for r in repository.job_history(session, "g")]
    print("\n", record.status.value, record.attempt, history)
    assert (record.status.value, record.attempt) == ("FAILED", 1), history


def _running_gang_with_retries(functions):
    """Gang "g" of 2 nodes (vm-1 rank 0, vm-2), running, its max_runtime_s 60 and max_retries 2."""
    functions.submit(job_request("g", nodes=2, max_runtime_s=60, max_retries=2, retry_backoff_s=0))
    for vm, ip in (("vm-1", "10.0.0.1"), ("vm-2", "10.0.0.2")):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=ip))
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))


def _ended(zen):
    """Gang "g"'s record and the reasons of its history."""
    record = job(zen, "g")
    with zen.db.transaction() as session:
        history = [r["reason"] or "" for r in repository.job_history(session, "g")]
    return record, history


def test_a_gang_whose_peer_fails_on_the_kill_before_the_timed_out_nodes_report_is_failed_not_retried(
        functions, zen, clock):
    """Node 1's limit fires first (its staging began first); its SIGTERM breaks the collectives and node 0 exits 1 at
    once, while node 1 still saves its checkpoint and uploads its outputs: node 0's FAILED comes first. The attempt
    ran into max_runtime_s all the same: FAILED, said so, never retried (the retry would run into it again)."""
    _running_gang_with_retries(functions)
    clock.advance(60)
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-1", exit_code=1, message="NCCL error: peer closed"))
    assert job(zen, "g").status.value == "STOPPING"
    clock.advance(30)  # node 1's last checkpoint and outputs uploaded
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-2", exit_code=143, over_limit="max_runtime_s",
                                  message="zen: killed after exceeding max_runtime_s=60"))
    record, history = _ended(zen)
    assert (record.status.value, record.attempt, record.retries) == ("FAILED", 1, 0), history
    assert history[-1] == "node 1 (vm-2) failed: stopped at max_runtime_s=60 (exit code 143)", history
    assert record.exit_code == 143 and record.message.startswith("node 1: zen: killed after exceeding"), record.message


def test_a_gang_whose_node_failed_before_the_others_limit_could_fire_is_retried_as_that_failure(functions, zen, clock):
    """Node 0 fails on its own 10 s before max_runtime_s could end node 1's part (counted from the CONFIRM, which
    came before either ran); the STOP reaches node 1 after its limit, so it too ends at its limit. The first
    failure is node 0's, no kill broke it: the attempt is retried as that failure, said so (max_retries 2), as it
    was before a kill at a limit was let to count before a failure reported first."""
    _running_gang_with_retries(functions)
    clock.advance(50)
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-1", exit_code=1, message="CUDA error: an illegal memory access"))
    clock.advance(40)
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-2", exit_code=143, over_limit="max_runtime_s",
                                  message="zen: killed after exceeding max_runtime_s=60"))
    record, history = _ended(zen)
    assert (record.status.value, record.attempt, record.retries) == ("PENDING", 2, 1), history
    assert "node 0 (vm-1): attempt 1 failed with exit code 1: retry 1 of 2" in history, history
    assert record.message == "CUDA error: an illegal memory access", record.message
