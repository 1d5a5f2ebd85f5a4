"""A host maintenance that cut an attempt after a note of its own is told as the host maintenance. An agent's
PREEMPTED report may carry a note before the shutdown's line: a job that exited 0 whose upload GCE's stop then cut
(``zen.agent.attempt``: its earlier notes first, a checkpoint save that failed, the resumed upload of an agent
restarted), each line kept. A preemption's "VM ... shut down while ..." is read on any line
(``zen.core.gave_back.shut_down``), but a host maintenance's "VM ... is stopping for host maintenance while ..."
was read on the first line only: the job's history said "VM vm-a gave the attempt back (<the earlier note>)", its
user told the earlier note ended the attempt, and the host maintenance was named nowhere. Through the real
heartbeat function."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.test_agent_requeue_named import _events

CUT = "zen: VM vm-a is stopping for host maintenance while uploading outputs (1 file done)"
NOTES = ["zen: killed after exceeding max_runtime_s=60",
         "checkpoint not saved (every 600 s): TransferError('503'); the previous checkpoint is kept",
         "zen: the agent on VM vm-a died while it uploaded the job's outputs and was restarted; the upload resumed"]


@pytest.mark.parametrize("note", NOTES)
def test_a_host_maintenance_cutting_the_upload_after_a_note_is_named(functions, zen, note):
    functions.submit(job_request("up"))
    functions.heartbeat(heartbeat("up", "CLAIMED", 1))
    functions.heartbeat(heartbeat("up", "PREEMPTED", 2, message=f"{note}\n{CUT}\nlast lines of the job"))

    [lost] = [reason for _, status, reason in _events(zen, "up") if status == "LOST"]
    assert lost == ("VM vm-a is stopping for host maintenance while uploading outputs (1 file done) "
                    "(no attempt spent)"), lost
