"""A gang's node whose agent reports PREEMPTED for a step the cloud failed before its command (its secrets: Secret
Manager unavailable past its budget; ``zen.core.gave_back``) gave the attempt back: its VM did not shut down. The
gang's history said "node 1 (vm-2) was preempted", the stop's and the requeue's; the step and why were named nowhere.
The gang's fate is as before (its other node stopped first, then rerun unspent); only the words change. A node whose
VM shut down still "was preempted"."""

from __future__ import annotations

import pytest

from tests.agent.test_secrets import HF, secret_manager  # noqa: F401 (fixture)
from tests.messages import heartbeat
from tests.test_agent_requeue_named import _events, _note_of_an_outage
from tests.test_functions_lifecycle import controls, job
from tests.test_gang_fates import running


def _rerun(functions, zen, message: str | None) -> list[tuple[int, str, str]]:
    running(functions)
    functions.heartbeat(heartbeat("g", "PREEMPTED", 3, vm="vm-2", **({"message": message} if message else {})))
    functions.heartbeat(heartbeat("g", "STOPPED", 3, vm="vm-1"))
    record = job(zen, "g")
    assert (record.status.value, record.attempt, record.preemptions, record.max_attempts) == ("QUEUED", 2, 1, 4)
    return _events(zen, "g")


def test_a_node_that_gave_the_attempt_back_is_named_so(functions, zen, publisher, secret_manager):  # noqa: F811
    note = _note_of_an_outage(secret_manager)
    events = _rerun(functions, zen, note)
    said = (f"node 1 (vm-2) gave the attempt back (secret HF_TOKEN: {HF}: Secret Manager unavailable: injected "
            "failure)")
    [stopping] = [reason for attempt, to, reason in events if to == "STOPPING"]
    [lost] = [reason for attempt, to, reason in events if to == "LOST"]
    assert stopping == f"{said}: the other nodes are stopped before the gang is rerun", stopping
    assert lost == f"VM vm-2 gave the attempt back (secret HF_TOKEN: {HF}: Secret Manager unavailable: injected failure) (no attempt spent)", lost
    [stop] = [c for c in controls(publisher, "vm-1") if c["action"] == "STOP"]
    assert stop["reason"] == f"preempted: {said}: the gang runs again", stop  # still a notice: the gang runs again


@pytest.mark.parametrize("message", [None, "zen: VM vm-2 shut down (SIGTERM)",
                                     "zen: killed after exceeding max_runtime_s=60\nzen: VM vm-2 shut down"])
def test_a_node_whose_vm_shut_down_was_preempted(functions, zen, message):
    events = _rerun(functions, zen, message)
    assert [reason for _, to, reason in events if to in ("STOPPING", "LOST")] == [
        "node 1 (vm-2) was preempted: the other nodes are stopped before the gang is rerun",
        "VM vm-2 was preempted (no attempt spent)"], events
