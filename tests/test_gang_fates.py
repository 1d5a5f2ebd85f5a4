"""A gang's fate when its nodes' reports cross a stop or a loss, through the functions and Postgres: the
outcome a one-VM job would have (a gang whose every node exited 0 as its stop came succeeded), and no
next attempt running beside a node of the last one."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import controls, job
from zen.core import gang


def running(functions, job_id: str = "g") -> None:
    functions.submit(job_request(job_id, nodes=2))
    for vm, ip in (("vm-1", "10.0.0.1"), ("vm-2", "10.0.0.2")):
        functions.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=vm, ip=ip))
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat(job_id, "RUNNING", 2, vm=vm))


def _both_exit_0(functions) -> None:
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm=vm, exit_code=0))


def test_a_gang_whose_nodes_all_exit_0_as_a_users_stop_comes_succeeded(functions, zen):
    running(functions)
    functions.stop({"job_id": "g", "reason": "done early"})
    _both_exit_0(functions)
    record = job(zen, "g")
    assert (record.status.value, record.exit_code, record.attempt) == ("SUCCEEDED", 0, 1)  # was CANCELLED


def _taken_back(zen, clock) -> None:
    """Its queue takes the running gang back (admission's preemption): STOPPING, ``preempted_by`` set."""
    with zen.jobs._store.transaction() as tx:
        current = tx.get_job("g", lock=True)
        zen.jobs.decisions.apply(tx, current, gang.decide_preempt(current, "queue prod needs its quota", clock()),
                                 actor="admission", now=clock(), admit=False)
    assert job(zen, "g").status.value == "STOPPING"


def test_a_gang_that_finished_as_its_queue_took_it_back_is_not_run_again(functions, zen, clock):
    running(functions)
    _taken_back(zen, clock)
    _both_exit_0(functions)
    record = job(zen, "g")
    assert (record.status.value, record.attempt) == ("SUCCEEDED", 1)  # was PENDING as attempt 2: run again


def _one_node_preempted(functions, zen) -> None:
    running(functions)
    functions.heartbeat(heartbeat("g", "PREEMPTED", 3, vm="vm-2"))
    assert (job(zen, "g").status.value, job(zen, "g").attempt) == ("STOPPING", 1)


def test_a_users_stop_while_a_lost_nodes_gang_stops_ends_it_cancelled_not_rerun(functions, zen):
    _one_node_preempted(functions, zen)
    functions.stop({"job_id": "g", "reason": "no more"})
    functions.heartbeat(heartbeat("g", "STOPPED", 4, vm="vm-1"))
    record = job(zen, "g")
    assert (record.status.value, record.attempt, record.stop_reason) == ("CANCELLED", 1, "no more")


def test_a_lost_nodes_gang_whose_other_node_never_answers_is_rerun_after_its_fence(functions, zen, publisher, clock,
                                                                                   config):
    _one_node_preempted(functions, zen)
    clock.advance(config.deadlines.preempted_stop_s - 1)
    functions.tick()
    assert job(zen, "g").status.value == "STOPPING"  # vm-1 may still run it, cut off from Zen
    clock.advance(2)
    functions.tick()  # past its fence, stop grace and margin: surely ended
    record = job(zen, "g")
    assert (record.status.value, record.attempt, record.preemptions) == ("QUEUED", 2, 1)
    assert [c["action"] for c in controls(publisher, "vm-1")][-1] == "STOP"


def test_a_lost_nodes_gang_whose_other_node_still_says_it_runs_is_not_rerun_beside_it(functions, zen, clock, config):
    """vm-1 never hears its STOP (its orders lost, its reports not) and reports its part RUNNING: the gang was rerun
    preempted_stop_s after the loss all the same, beside it. It waits while a node says it runs."""
    _one_node_preempted(functions, zen)
    waits = config.deadlines.preempted_stop_s
    for seq in range(4, 4 + int(waits // 30) + 2):
        clock.advance(30)
        functions.heartbeat(heartbeat("g", "RUNNING", seq, vm="vm-1"))
        functions.tick()
    assert (job(zen, "g").status.value, job(zen, "g").attempt) == ("STOPPING", 1)
    for _ in range(int(waits // 30) + 1):  # quiet since (ticks half a minute apart: no gap in them)
        clock.advance(30)
        functions.tick()
    assert (job(zen, "g").status.value, job(zen, "g").attempt) == ("QUEUED", 2)


def test_a_node_that_gave_its_part_back_is_noticed_once_another_node_runs(functions, zen, clock, config):
    """vm-1 gave its part back a moment before vm-2's claim completed the gang; vm-2 was confirmed and its
    RUNNING came before vm-1's VM heartbeat naming the part. The gang must be retried unspent, not left to
    run one node short until the sweep spends its only attempt; once vm-2 has stopped (never beside it)."""
    from tests.test_given_back_claims import T, vm_beat

    functions.submit(job_request("g", nodes=2, max_attempts=1))
    functions.heartbeat(heartbeat("g", "CLAIMED", T, vm="vm-1", ip="10.0.0.1"))
    clock.advance(config.gangs.assemble_s + 20)
    functions.heartbeat(heartbeat("g", "CLAIMED", T + 1, vm="vm-2", ip="10.0.0.2"))
    functions.heartbeat(heartbeat("g", "RUNNING", T + 2, vm="vm-2"))
    functions.heartbeat(vm_beat("vm-1", T + 620_000, ("g", 1)))
    assert (job(zen, "g").status.value, job(zen, "g").attempt) == ("STOPPING", 1)
    functions.heartbeat(heartbeat("g", "STOPPED", T + 3, vm="vm-2"))
    record = job(zen, "g")
    assert (record.status.value, record.attempt, record.max_attempts) == ("QUEUED", 2, 2)


def test_a_failure_caused_by_a_peers_preemption_requeues_the_gang_not_fails_it(functions, zen):
    """torchrun: vm-2 is preempted, vm-1's collectives break and it exits 1 at once, while vm-2's agent still
    saves its checkpoint before it says PREEMPTED. The attempt was lost to the cloud: requeued, not FAILED."""
    running(functions)
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-1", exit_code=1, message="NCCL: connection reset"))
    assert job(zen, "g").status.value == "STOPPING"
    functions.heartbeat(heartbeat("g", "PREEMPTED", 3, vm="vm-2"))
    record = job(zen, "g")
    assert (record.status.value, record.attempt, record.preemptions) == ("QUEUED", 2, 1)  # was FAILED


def test_a_failed_nodes_gang_whose_other_node_never_answers_fails_after_its_fence(functions, zen, clock, config):
    running(functions)
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-1", exit_code=7))
    clock.advance(config.deadlines.preempted_stop_s + 1)
    functions.tick()
    record = job(zen, "g")
    assert (record.status.value, record.exit_code, record.attempt) == ("FAILED", 7, 1)


def test_a_node_that_ended_early_is_charged_until_its_own_end_not_the_gangs(functions, zen, clock):
    """Rank 1 ends after 60 s and its VM is free for other work (zen.jobs.claims); rank 0 runs on to 1,920 s.
    The attempt is charged 60 + 1,920 VM-seconds, not 2 x 1,920 (its VM's next job pays its own time)."""
    running(functions)
    clock.advance(60)
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm="vm-2", exit_code=0))
    clock.advance(60)  # its VM claims a spare copy of the start: no new end for the node (it moved its charge to here)
    functions.heartbeat(heartbeat("g", "CLAIMED", 4, vm="vm-2", ip="10.0.0.2"))
    clock.advance(1800)
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm="vm-1", exit_code=0))
    assert job(zen, "g").status.value == "SUCCEEDED"
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT extract(epoch FROM ended_at - started_at) * vm_share AS vm_s, gpu_seconds, gpus "
                            "FROM attempt_usage WHERE job_id = 'g'")
    per_vm = row["gpus"] // 2
    assert (round(float(row["vm_s"])), round(float(row["gpu_seconds"]))) == (60 + 1920, per_vm * (60 + 1920))


def test_a_silent_node_is_charged_until_the_sweep_gave_it_up_as_one_vm_is(functions, zen, clock):
    """vm-2 is silent from its RUNNING while vm-1 beats on: it was charged to its last report (0 s), where a
    silent one-VM attempt (and a gang whose nodes all went silent) is charged to the sweep."""
    running(functions)
    seq, swept = 3, 0
    while job(zen, "g").status.value != "STOPPING":
        clock.advance(30)
        swept += 30
        functions.heartbeat(heartbeat("g", "RUNNING", seq, vm="vm-1"))
        seq += 1
        functions.tick()
    clock.advance(10)
    functions.heartbeat(heartbeat("g", "STOPPED", seq, vm="vm-1", exit_code=-15))
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT extract(epoch FROM ended_at - started_at) AS wall, outcome, "
                            "extract(epoch FROM ended_at - started_at) * vm_share AS vm_s FROM attempt_usage WHERE job_id = 'g'")
    assert (row["outcome"], round(float(row["wall"])), round(float(row["vm_s"]))) == ("LOST", swept + 10, 2 * swept + 10)


def test_a_node_that_ended_early_is_charged_from_the_gangs_claim_when_its_run_began_later(functions, zen, clock):
    """The usage row runs from the gang's claim (ASSIGNED); its image pulls for 300 s before RUNNING. Rank 1
    ends 60 s into the run, rank 0 at 3,600 s: charged 360 + 3,900 VM-seconds (each node from the claim to its
    own end), not the share of the run alone times the claim's span (it charged rank 1 65 s)."""
    functions.submit(job_request("g", nodes=2))
    for vm, ip in (("vm-1", "10.0.0.1"), ("vm-2", "10.0.0.2")):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=ip))
    clock.advance(300)
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))
    clock.advance(60)
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm="vm-2", exit_code=0))
    clock.advance(3540)
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm="vm-1", exit_code=0))
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT extract(epoch FROM ended_at - started_at) AS wall, extract(epoch FROM ended_at - "
                            "started_at) * vm_share AS vm_s, gpu_seconds, gpus FROM attempt_usage WHERE job_id = 'g'")
    per_vm = row["gpus"] // 2
    assert round(float(row["wall"])) == 3900
    assert (round(float(row["vm_s"])), round(float(row["gpu_seconds"]))) == (360 + 3900, per_vm * (360 + 3900))


def test_a_silent_nodes_gang_is_rerun_once_the_others_stopped_or_their_fence_passed(functions, zen, clock, config):
    running(functions)
    timeout = config.deadlines.heartbeat_timeout_s
    for seq in range(3, 3 + int(timeout // 30) + 2):  # vm-1 beats on, vm-2 is silent
        clock.advance(30)
        functions.heartbeat(heartbeat("g", "RUNNING", seq, vm="vm-1"))
        functions.tick()
    assert (job(zen, "g").status.value, job(zen, "g").attempt) == ("STOPPING", 1)  # vm-1 is told STOP first
    for _ in range(int(config.deadlines.preempted_stop_s // 30) + 1):  # vm-1 never answers: cut off too
        clock.advance(30)
        functions.tick()  # (ticks a gap apart would restart the deadline: Zen may not have heard)
    record = job(zen, "g")
    assert (record.status.value, record.attempt, record.max_attempts) == ("QUEUED", 2, 3)  # silence spends one


def test_a_gang_whose_nodes_ran_as_different_models_is_priced_as_each_node_ran(functions, zen, clock):
    """Nodes claim by region, not model: rank 0 on a VM seen as standard, rank 1 on one seen as spot, which
    ends 60 s into a 1,920 s attempt. The attempt was priced at rank 0's model for both nodes (14.69 a
    VM-hour where its VMs cost 14.69 and 5.17); now each node's price for its share of the VM-time."""
    from tests.test_usage import PRICE, SPOT, _seen_as

    _seen_as(zen, clock, ["standard"], ["vm-1"])
    _seen_as(zen, clock, ["spot", "standard"], ["vm-1", "vm-2"])  # vm-1 still listed: seen as it was first
    running(functions)
    clock.advance(60)
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm="vm-2", exit_code=0))
    clock.advance(1860)
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm="vm-1", exit_code=0))
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT model, usd_per_hour, vm_share, extract(epoch FROM ended_at - started_at) AS wall "
                            "FROM attempt_usage WHERE job_id = 'g'")
    assert row["model"] == "spot+standard"  # both nodes' models (which ran as which is not kept)
    assert round(float(row["wall"])) == 1920 and abs(float(row["vm_share"]) - 1980 / 1920) < 1e-9
    assert abs(row["usd_per_hour"] - (1920 * PRICE + 60 * SPOT) / 1980) < 1e-9


@pytest.mark.parametrize("word", ["PREEMPTED", "STOPPED", "FAILED"])
def test_a_node_that_ended_does_not_change_the_running_gangs_fate_by_a_later_word(functions, zen, publisher, word):
    """Rank 1 exited 0; its agent restarted, claimed a leftover copy of the gang's start (told nothing) and, its
    spot VM going, said PREEMPTED: the running gang was stopped and rerun as attempt 2, its work redone (or,
    for STOPPED, ended CANCELLED). A node's end is its first (docs/how-to/multi-node.md)."""
    running(functions)  # vm-1, vm-2 run attempt 1
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm="vm-2", exit_code=0))
    functions.heartbeat(heartbeat("g", "CLAIMED", 50, vm="vm-2", ip="10.0.0.2"))
    functions.heartbeat(heartbeat("g", word, 51, vm="vm-2", exit_code=1 if word == "FAILED" else None))
    record = job(zen, "g")
    assert [n.status for n in record.gang] == ["RUNNING", "SUCCEEDED"]
    assert (record.status.value, record.attempt, record.preemptions) == ("RUNNING", 1, 0)
    assert "STOP" not in [c["action"] for c in controls(publisher, "vm-1")]
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 4, vm="vm-1", exit_code=0))
    assert job(zen, "g").status.value == "SUCCEEDED"


def test_a_silent_nodes_late_exit_does_not_turn_the_lost_attempt_into_a_preemption_of_its_peer(functions, zen, clock):
    """vm-2 went silent; its own exit 0 came once the others were told to stop, replacing SILENT: the attempt
    was recorded as lost because vm-1, which obeyed the STOP, "was preempted" (no attempt spent)."""
    from zen.store import repository

    functions.submit(job_request("g", nodes=2, max_attempts=3))
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=f"10.0.0.{vm[-1]}"))
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))
    for seq in range(3, 7):  # vm-2 goes silent; vm-1 keeps reporting
        clock.advance(40)
        functions.heartbeat(heartbeat("g", "RUNNING", seq, vm="vm-1"))
        functions.tick()
    record = job(zen, "g")
    assert record.status.value == "STOPPING" and [n.status for n in record.gang] == ["RUNNING", "SILENT"]
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 9, vm="vm-2", exit_code=0))  # vm-2's own word, late
    functions.heartbeat(heartbeat("g", "STOPPED", 10, vm="vm-1", exit_code=-15))  # vm-1 obeyed the STOP
    record = job(zen, "g")
    with zen.db.transaction() as session:
        reasons = [r["reason"] for r in repository.job_history(session, "g") if r["attempt"] == 1]
    assert record.attempt == 2
    # vm-1 was never preempted: it stopped because Zen told it to
    assert not any("vm-1 was preempted" in reason for reason in reasons), reasons
    assert record.preemptions == 0, "a silence counted as a cloud preemption"


def test_a_failed_node_beside_a_peer_that_exited_0_fails_the_gang_with_its_exit_code(functions, zen, publisher):
    """The silent node's rule above must not take a peer that finished its part before the STOP came for a silent
    one: the first failure ends the gang FAILED with its exit code."""
    from tests.test_gang_lifecycle import assembled, beat

    assembled(functions, zen, publisher)
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "RUNNING", 2)
    beat(functions, "vm-2", "FAILED", 3, exit_code=3, message="boom")
    assert job(zen, "g").status.value == "STOPPING"
    beat(functions, "vm-1", "SUCCEEDED", 4, exit_code=0)
    record = job(zen, "g")
    assert (record.status.value, record.exit_code, record.attempt) == ("FAILED", 3, 1)


def _requeued_after_taken_back_one_preempted_then_one_over_limit(functions, zen, clock) -> None:
    running(functions)
    _taken_back(zen, clock)
    functions.heartbeat(heartbeat("g", "PREEMPTED", 3, vm="vm-2"))
    clock.advance(1)  # killed at its limit after the cloud took its peer: the attempt was lost to the cloud first
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-1", exit_code=143, over_limit="max_runtime_s"))


def _second_attempt_stopped_by_its_user(functions, zen) -> tuple[str, int]:
    for vm, ip in (("vm-1", "10.0.0.1"), ("vm-2", "10.0.0.2")):
        functions.heartbeat(heartbeat("g", "CLAIMED", 10, attempt=2, vm=vm, ip=ip))
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat("g", "RUNNING", 11, attempt=2, vm=vm))
    functions.stop({"job_id": "g", "reason": "not needed any more"})
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat("g", "STOPPED", 12, attempt=2, vm=vm, exit_code=143))
    record = job(zen, "g")
    return record.status.value, record.attempt


def test_a_gang_requeued_while_its_queue_took_it_back_carries_no_preemption_into_its_next_attempt(functions, zen,
                                                                                                  clock):
    """Taken back by its queue, one node taken by the cloud and then the other killed at its limit: the gang was requeued
    through the cloud's preemption, which kept ``preempted_by``; the next attempt, stopped by its user, was taken
    for a preemption again and rerun (PENDING, attempt 3), and was no preemption candidate any more."""
    _requeued_after_taken_back_one_preempted_then_one_over_limit(functions, zen, clock)
    record = job(zen, "g")
    assert (record.status.value, record.attempt, record.preempted_by) == ("QUEUED", 2, None)
    assert _second_attempt_stopped_by_its_user(functions, zen) == ("CANCELLED", 2)


def test_a_gang_left_with_an_earlier_attempts_preemption_is_cancelled_by_its_users_stop(functions, zen, clock):
    """A row written before a new attempt cleared ``preempted_by`` (a running gang still holding its last attempt's
    queue preemption): its user's stop was taken for a preemption and the gang run again. A user's stop clears it."""
    from zen.store.migrate import migrate

    _requeued_after_taken_back_one_preempted_then_one_over_limit(functions, zen, clock)
    with zen.db.transaction() as session:  # a row an earlier version left
        session.sql("UPDATE jobs SET preempted_by = 'queue prod needs its quota' WHERE job_id = 'g'")
    migrate(zen.db, pause_s=0.0)  # the upgrade
    assert _second_attempt_stopped_by_its_user(functions, zen) == ("CANCELLED", 2)
