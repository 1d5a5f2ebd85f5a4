"""A gang completed a moment after one node gave its part back (zen.core.gang.decide_given_back): the node
confirmed meanwhile already runs its part. The gang was requeued as attempt 2 at once, and attempt 2 assembled
and was confirmed while attempt 1's node still reported RUNNING (in its stop grace, saving the node-1/
checkpoint attempt 2's rank 1 restores). It waits STOPPING for that node now, as for a node lost."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import controls, job
from tests.test_given_back_claims import T, vm_beat


def test_a_gang_requeued_for_a_given_back_part_waits_for_its_running_node_before_the_next_attempt_runs(
        functions, zen, publisher, clock, config):
    functions.submit(job_request("g", nodes=2, max_attempts=1))
    functions.heartbeat(heartbeat("g", "CLAIMED", T, vm="vm-1", ip="10.0.0.1"))
    clock.advance(config.gangs.assemble_s + 20)
    functions.heartbeat(heartbeat("g", "CLAIMED", T + 1, vm="vm-2", ip="10.0.0.2"))  # completes the gang
    functions.heartbeat(heartbeat("g", "RUNNING", T + 2, vm="vm-2"))  # vm-2 runs its part of attempt 1
    functions.heartbeat(vm_beat("vm-1", T + 620_000, ("g", 1)))  # vm-1 had given its part back
    # attempt 1's node vm-2 has been told STOP but has not answered: it still runs (stop grace, checkpoint)
    assert controls(publisher, "vm-2")[-1]["action"] == "STOP"
    functions.heartbeat(heartbeat("g", "RUNNING", T + 3, vm="vm-2"))
    # The next attempt assembles on two other VMs (vm-1 is idle again, vm-3 another idle VM)
    record = job(zen, "g")
    functions.heartbeat(heartbeat("g", "CLAIMED", T + 620_001, attempt=record.attempt, vm="vm-1", ip="10.0.0.1"))
    functions.heartbeat(heartbeat("g", "CLAIMED", T + 5, attempt=record.attempt, vm="vm-3", ip="10.0.0.3"))
    confirmed = [c["vm"] for c in controls(publisher) if c["action"] == "CONFIRM" and c["attempt"] == 2]
    # vm-2 still runs attempt 1: attempt 2 must not be confirmed (run) beside it
    assert confirmed == [], f"attempt 2 confirmed on {confirmed} while vm-2 still runs attempt 1"


def test_the_vm_that_gave_its_part_back_may_take_another_job_while_the_gang_stops(functions, zen, clock, config, db):
    """Its node's GAVE_BACK was no end the SQL knew (held_vms, vm_holds_job): the scaler took the idle VM for busy
    until the other node answered."""
    from zen.store import fleet

    functions.submit(job_request("g", nodes=2, max_attempts=1))
    functions.heartbeat(heartbeat("g", "CLAIMED", T, vm="vm-1", ip="10.0.0.1"))
    clock.advance(config.gangs.assemble_s + 20)
    functions.heartbeat(heartbeat("g", "CLAIMED", T + 1, vm="vm-2", ip="10.0.0.2"))  # completes the gang
    functions.heartbeat(heartbeat("g", "RUNNING", T + 2, vm="vm-2"))
    functions.heartbeat(vm_beat("vm-1", T + 620_000, ("g", 1)))  # vm-1 had given its part back
    record = job(zen, "g")
    assert record.status.value == "STOPPING" and record.vm == "vm-1"
    with zen.db.transaction() as session:
        held = fleet.held_vms(session, record.cluster)
    functions.submit(job_request("other"))
    functions.heartbeat(heartbeat("other", "CLAIMED", T + 620_001, vm="vm-1"))
    assert job(zen, "other").status.value == "ASSIGNED", job(zen, "other").message
    assert "vm-1" not in held, held
