"""A gang node's reports in the orders Pub/Sub may deliver them (zen.core.gang, gang_records.word_after), through
the functions against a real Postgres: a report overtaken by the node's later one, or coming after the node's end,
changes neither the node's word nor its last sign of life; a VM gone before its claim came joins no gang."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import controls, job
from tests.test_gang_fates import running
from zen.core import gang
from zen.store import repository


def test_a_vm_gone_before_its_claim_came_joins_no_gang(functions, zen):
    """Its PREEMPTED overtook its CLAIMED: the late claim made the gone VM a node, the gang was confirmed to it
    and ran a node short (its silence then spent the attempt), as one VM's job never is."""
    functions.submit(job_request("g", nodes=2, max_attempts=1))
    functions.heartbeat(heartbeat("g", "PREEMPTED", 2, vm="vm-1"))
    functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm="vm-1", ip="10.0.0.1"))  # the late copy
    functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm="vm-2", ip="10.0.0.2"))
    record = job(zen, "g")
    assert (record.status.value, [n.vm for n in record.gang or []]) == ("QUEUED", ["vm-2"])


def test_claims_of_restarted_agents_do_not_keep_a_gang_alive(functions, zen, clock, config):
    """Each node's agent restarted (its part ended with it) and claims a spare copy every 20 s: each claim
    moved the node's last word, and the dead gang stayed RUNNING, its VMs and quota held."""
    running(functions)
    for seq in range(10, 10 + int(config.deadlines.heartbeat_timeout_s // 20) + 3):
        clock.advance(20)
        functions.heartbeat(heartbeat("g", "RUNNING", seq, vm="vm-1"))
        functions.heartbeat(heartbeat("g", "CLAIMED", seq, vm="vm-2", ip="10.0.0.2"))
        functions.tick()
    assert job(zen, "g").status.value == "STOPPING"  # vm-2 taken for silent, vm-1 stopped before the rerun


def test_a_silent_nodes_late_report_leaves_its_silence_spent(functions, zen, clock):
    """Zen called vm-2 SILENT and stopped vm-1; vm-2's fence then fell and its PREEMPTED came: it replaced
    SILENT, and the silence (an attempt spent, as one silent VM's) became a free preemption."""
    running(functions)
    seq = 3
    while job(zen, "g").status.value != "STOPPING":
        clock.advance(30)
        functions.heartbeat(heartbeat("g", "RUNNING", seq, vm="vm-1"))
        seq += 1
        functions.tick()
    functions.heartbeat(heartbeat("g", "PREEMPTED", 50, vm="vm-2"))
    functions.heartbeat(heartbeat("g", "STOPPED", seq, vm="vm-1", exit_code=-15))
    record = job(zen, "g")
    with zen.db.transaction() as session:
        reasons = [r["reason"] for r in repository.job_history(session, "g") if r["to_status"]]
    assert (record.status.value, record.attempt, record.max_attempts, record.preemptions) == ("QUEUED", 2, 3, 0)
    assert not any("preempted" in reason for reason in reasons)


@pytest.mark.parametrize("stop", ["its queue's preemption", "its user's stop"])
def test_a_node_that_exited_0_stays_succeeded_whatever_its_spare_claim_is_answered(functions, zen, clock, publisher,
                                                                                    stop):
    """vm-2 exited 0 and its VM claimed a spare copy; the gang stopped, the claim was told STOP and answered
    STOPPED, which replaced SUCCEEDED: a gang whose every node exited 0 ran again, or ended CANCELLED."""
    running(functions)
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm="vm-2", exit_code=0))
    functions.heartbeat(heartbeat("g", "CLAIMED", 50, vm="vm-2", ip="10.0.0.2"))  # a spare copy: told nothing
    if stop == "its user's stop":
        functions.stop({"job_id": "g", "reason": "done early"})
    else:
        with zen.jobs._store.transaction() as tx:
            current = tx.get_job("g", lock=True)
            zen.jobs.decisions.apply(tx, current, gang.decide_preempt(current, "queue prod needs its quota", clock()),
                                     actor="admission", now=clock(), admit=False)
    functions.heartbeat(heartbeat("g", "CLAIMED", 51, vm="vm-2", ip="10.0.0.2"))  # its claim again: told STOP
    assert controls(publisher, "vm-2")[-1]["action"] == "STOP"
    functions.heartbeat(heartbeat("g", "STOPPED", 52, vm="vm-2", message="stopped before it started"))
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 4, vm="vm-1", exit_code=0))
    record = job(zen, "g")
    assert (record.status.value, record.attempt) == ("SUCCEEDED", 1)
