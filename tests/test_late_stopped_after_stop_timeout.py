"""A stop the VM answers after ``stop_timeout_s``: the sweep has ended the job CANCELLED ("no answer from the VM
within 120s of stop"), then the agent's STOPPED arrives (its answer was late: a slow docker kill, a checkpoint
upload, a control message delivered late). The report confirms what Zen decided: it is taken as the late answer
it is (as a gang's node's late STOPPED is: ``zen.core.gang._after_the_end``); it was recorded and announced as a
refused message saying "transition CANCELLED -> CANCELLED is not allowed"."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job


def rejections(zen) -> list[str]:
    with zen.db.transaction() as session:
        return [row["reason"] for row in session.sql("SELECT reason FROM rejected_messages ORDER BY 1")]


def test_a_stopped_report_after_the_stop_timeout_is_not_refused(functions, zen, clock):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-7"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-7"))
    functions.stop({"job_id": "job-1", "reason": "user asked"})
    clock.advance(121)
    functions.tick()
    assert job(zen, "job-1").status.value == "CANCELLED"
    assert rejections(zen) == []

    functions.heartbeat(heartbeat("job-1", "STOPPED", 3, vm="vm-7", exit_code=143))  # the VM's late answer

    assert job(zen, "job-1").status.value == "CANCELLED"
    assert rejections(zen) == [], "the VM's late STOPPED, which agrees with Zen, was refused as a bad message"
