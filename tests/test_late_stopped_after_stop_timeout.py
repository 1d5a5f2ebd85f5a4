"""A stop the VM answers after ``stop_timeout_s``: the sweep has ended the job CANCELLED ("no answer from the VM
within 120s of stop"), then the agent's STOPPED arrives (its answer was late: a slow docker kill, a checkpoint
upload, a control message delivered late), or its PREEMPTED (the VM shut down while the job stopped). The report
agrees with what Zen decided: it is taken as the late answer it is, its exit code and message kept on the job (as a
gang's node's late end is: ``zen.core.gang._after_the_end``). It was recorded and announced as a refused message
saying "transition CANCELLED -> CANCELLED is not allowed" (PREEMPTED: "-> LOST")."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job

NOTE = "zen: uploading outputs exceeded its budget, max_runtime_s=600"


def rejections(zen) -> list[str]:
    with zen.db.transaction() as session:
        return [row["reason"] for row in session.sql("SELECT reason FROM rejected_messages ORDER BY 1")]


def _stopped_unanswered(functions, zen, clock) -> None:
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-7"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-7"))
    functions.stop({"job_id": "job-1", "reason": "user asked"})
    clock.advance(121)
    functions.tick()
    assert job(zen, "job-1").status.value == "CANCELLED"
    assert rejections(zen) == []


@pytest.mark.parametrize("status", ["STOPPED", "PREEMPTED"])
def test_a_late_answer_to_a_stop_is_kept_not_refused(functions, zen, clock, status):
    _stopped_unanswered(functions, zen, clock)
    functions.heartbeat(heartbeat("job-1", status, 3, vm="vm-7", exit_code=143, message=f"zen: stopped\n{NOTE}"))
    ended = job(zen, "job-1")
    assert ended.status.value == "CANCELLED" and rejections(zen) == [], rejections(zen)
    assert ended.exit_code == 143 and NOTE in (ended.message or ""), (ended.exit_code, ended.message)


def test_another_vms_late_word_is_still_refused(functions, zen, clock):
    _stopped_unanswered(functions, zen, clock)
    functions.heartbeat(heartbeat("job-1", "STOPPED", 3, vm="vm-8", exit_code=143))
    assert job(zen, "job-1").exit_code is None and len(rejections(zen)) == 1
