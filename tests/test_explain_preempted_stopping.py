"""`zen explain` (and the console's job line) of a job stopping to be rerun said it would be "ended" without its
VM's word at the deadline, and a gang stopping for a node the cloud took said it was stopped on request: both are
requeued then, not ended (a user who read it as the end, and submitted the job again, ran it twice). A queue's
preemption said it "takes back reclaim borrowed quota"."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat
from tests.test_explain_stopping import why
from tests.test_gang_fates import running
from tests.test_queues import (  # noqa: F401 - fixture
    RECLAIM, borrow_all_and_reclaim, queued_zen, statuses,
)


@pytest.mark.queues(RECLAIM)
def test_a_job_its_queue_takes_back_is_said_to_be_rerun_not_ended(queued_zen, clock):
    zen, functions = queued_zen
    borrow_all_and_reclaim(functions, clock)
    assert statuses(zen, "a3") == ["STOPPING"]
    line = why(zen, "a3")
    assert "it is ended" not in line, line  # at the deadline it goes back to PENDING, not to an end
    assert "the job waits for its queue's quota again (no attempt spent)" in line, line
    assert "stopping: preempted: a 4-GPU job of queue team-b (priority 0) takes back the quota its queue lent" in line, line


def test_a_gang_stopping_for_a_node_the_cloud_took_says_so(functions, zen):
    running(functions)
    functions.heartbeat(heartbeat("g", "PREEMPTED", 3, vm="vm-2"))
    line = why(zen, "g")
    assert "stopping: node 1 (vm-2) was preempted: the other nodes are stopped before the gang is rerun" in line, line
    assert "stop requested" not in line and "it is ended" not in line, line
    assert "the gang runs again" in line, line
