"""An agent reports PREEMPTED for more than its VM going away: a step before the job's command that the cloud's
services failed for a while (its secrets: Secret Manager unavailable past ``zen.agent.secrets.BUDGET_S``; its inputs:
Cloud Storage unavailable; docker's pull cut), so that Zen runs the job again without spending an attempt. The job's
history, its notices and, once ``FREE_PREEMPTIONS`` such were free, its FAILED said "VM ... was preempted": untrue,
and the step that failed, and why, were named nowhere the user looks once the job was claimed again. The attempt's
end now names the agent's reason; a VM that shut down still "was preempted". The agent's note here is the one the
agent makes (``zen.agent.secrets.resolve``, against the Secret Manager stand-in through the official client)."""

from __future__ import annotations

import grpc
import pytest

from tests.agent.test_secrets import HF, FakeTime, secret_manager  # noqa: F401 (fixture)
from tests.messages import heartbeat, job_request
from zen.adapters.secret_manager import secret_client, secret_reader
from zen.agent.secrets import SecretsFailed, resolve
from zen.core.lifecycle import FREE_PREEMPTIONS
from zen.store import repository


def _note_of_an_outage(secret_manager) -> str:  # noqa: F811
    secret_manager.store.fail_next(grpc.StatusCode.UNAVAILABLE, 100)
    time = FakeTime()
    with pytest.raises(SecretsFailed) as failed:
        resolve({"HF_TOKEN": HF}, secret_reader(lambda location: secret_client(secret_manager.endpoint, location)),
                clock=time.clock, sleep=time.sleep)
    return failed.value.note


def _events(zen, job_id: str) -> list[tuple[int, str, str]]:
    with zen.db.transaction() as tx:
        return [(r["attempt"], r["to_status"], r["reason"]) for r in repository.all_job_events(tx)
                if r["job_id"] == job_id]


def test_a_secret_manager_outage_is_named_where_the_attempt_was_lost(functions, zen, secret_manager):  # noqa: F811
    note = _note_of_an_outage(secret_manager)
    functions.submit(job_request("sec", max_attempts=1))
    functions.heartbeat(heartbeat("sec", "CLAIMED", 1))
    functions.heartbeat(heartbeat("sec", "PREEMPTED", 2, message=note))

    [lost] = [reason for attempt, status, reason in _events(zen, "sec") if status == "LOST"]
    assert "was preempted" not in lost, lost
    assert lost == (f"VM vm-a gave the attempt back (secret HF_TOKEN: {HF}: Secret Manager unavailable: injected "
                    "failure) (no attempt spent)"), lost


def test_a_job_failed_after_its_free_requeues_names_the_last_ones_reason(functions, zen, secret_manager):  # noqa: F811
    note = _note_of_an_outage(secret_manager)
    functions.submit(job_request("sec", max_attempts=1))
    for attempt in range(1, FREE_PREEMPTIONS + 2):
        for status, seq in (("CLAIMED", 1), ("PREEMPTED", 2)):
            functions.heartbeat(heartbeat("sec", status, seq, attempt=attempt, vm=f"vm-{attempt}",
                                          **({"message": note} if status == "PREEMPTED" else {})))
    [failed] = [reason for _, status, reason in _events(zen, "sec") if status == "FAILED"]
    assert "Secret Manager unavailable" in failed and "was preempted" not in failed, failed


@pytest.mark.parametrize("message", [None, "zen: VM vm-a shut down (SIGTERM)", "VM vm-a is shutting down",
                                     "zen: VM vm-a shut down while staging inputs (1 file done)\nlast lines"])
def test_a_vm_that_shut_down_was_preempted(functions, zen, message):
    functions.submit(job_request("spot"))
    functions.heartbeat(heartbeat("spot", "CLAIMED", 1))
    functions.heartbeat(heartbeat("spot", "PREEMPTED", 2, **({"message": message} if message else {})))

    [lost] = [reason for _, status, reason in _events(zen, "spot") if status == "LOST"]
    assert lost == "VM vm-a was preempted (no attempt spent)", lost


def test_a_shutdown_cutting_the_upload_after_the_jobs_own_note_was_preempted(functions, zen):
    functions.submit(job_request("up"))
    functions.heartbeat(heartbeat("up", "CLAIMED", 1))
    functions.heartbeat(heartbeat("up", "PREEMPTED", 2, message="zen: killed after exceeding max_runtime_s=60\n"
                                  "zen: VM vm-a shut down while uploading outputs (1 file done)"))

    [lost] = [reason for _, status, reason in _events(zen, "up") if status == "LOST"]
    assert lost == "VM vm-a was preempted (no attempt spent)", lost
