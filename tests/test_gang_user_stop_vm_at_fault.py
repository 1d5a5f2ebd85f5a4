"""A user's stop of a gang one of whose VMs is found at fault as its part stops (``zen.agent.gpucheck.stopped_fault``:
the node reports PREEMPTED, not STOPPED): the gang ends CANCELLED as the user asked, whichever node answers first,
not requeued for the VM's fault. Through the functions and Postgres."""

from __future__ import annotations

import pytest

from tests.test_gang_lifecycle import assembled, beat
from tests.test_functions_lifecycle import job
from tests.test_gang_node_vm_fault import AT_FAULT


@pytest.mark.parametrize("first", ["vm-1", "vm-2"])
def test_a_users_stop_of_a_gang_with_a_node_at_fault_ends_it_cancelled(functions, zen, publisher, first):
    assembled(functions, zen, publisher)
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "RUNNING", 2)
    functions.stop({"job_id": "g", "reason": "done early"})
    assert job(zen, "g").status.value == "STOPPING"
    answers = {"vm-1": dict(status="STOPPED", exit_code=-15), "vm-2": dict(status="PREEMPTED", exit_code=143,
                                                                           message=AT_FAULT)}
    for vm in (first, *(v for v in answers if v != first)):
        beat(functions, vm, answers[vm]["status"], 3, **{k: v for k, v in answers[vm].items() if k != "status"})
    record = job(zen, "g")
    assert (record.status.value, record.attempt) == ("CANCELLED", 1), record.status
