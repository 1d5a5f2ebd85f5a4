"""A job's message outlived its attempt: a rerun whose attempt 1 said LEFT_RUNNING (its VM deleted, no final report)
still said it on attempt 2, whose agent's reports carry no message, and stopped as usual on a VM retired for its pull
limit, that VM was released for deletion mid-stop (the checkpoint's save and the outputs' upload cut). The note goes
with the new attempt's claim; attempt 2's VM stays held until it answers."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_left_running_vm_released import CLUSTER, _vm_beat
from zen.core import gang
from zen.core.reports import LEFT_RUNNING
from zen.store import fleet


def test_a_rerun_stopping_as_usual_on_a_vm_retired_for_its_pull_limit_still_holds_it(functions, zen, clock, config):
    functions.submit(job_request("a", cluster=CLUSTER))
    functions.heartbeat(heartbeat("a", "CLAIMED", 1, vm="vm-1"))
    functions.heartbeat(heartbeat("a", "RUNNING", 2, vm="vm-1"))
    with zen.jobs._store.transaction() as tx:
        current = tx.get_job("a", lock=True)
        zen.jobs.decisions.apply(tx, current, gang.decide_preempt(current, "queue prod needs its quota", clock()),
                                 actor="admission", now=clock(), admit=False)
    functions.heartbeat(heartbeat("a", "RUNNING", 3, vm="vm-1", message=LEFT_RUNNING))
    clock.advance(config.deadlines.preempted_stop_s - 1)
    functions.tick()
    clock.advance(2)
    functions.tick()  # vm-1 deleted and silent: attempt 2
    with zen.db.transaction() as session:
        row = session.one("get_job", job_id="a")
    assert (row["status"], row["attempt"]) == ("QUEUED", 2)

    functions.heartbeat(heartbeat("a", "CLAIMED", 1, attempt=2, vm="vm-2"))
    functions.heartbeat(heartbeat("a", "RUNNING", 2, attempt=2, vm="vm-2"))
    functions.stop({"job_id": "a"})  # STOPPING: vm-2 saves a checkpoint, uploads the outputs
    functions.heartbeat(heartbeat("a", "RUNNING", 3, attempt=2, vm="vm-2"))
    functions.heartbeat(_vm_beat("vm-2", 300, "RETIRED"))  # its pull limit reached
    with zen.db.transaction() as session:
        row = session.one("get_job", job_id="a")
        held = fleet.held_vms(session, CLUSTER)
    assert row["status"] == "STOPPING"
    assert "vm-2" in held, f"vm-2 released for deletion mid-stop; the job's message: {row['message']!r}"
