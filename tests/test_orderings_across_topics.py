"""Orderings users and VMs produce across Zen's topics (Pub/Sub orders nothing, delivers at least once), through
the functions: a copy of a submission delivered after its job ended runs nothing, a claim delivered before its
job's submission wins nothing and leaves the job to run, and a stop crossing a requeue still ends the job."""

from __future__ import annotations

import json

from tests.messages import agent_run, heartbeat, job_request
from tests.test_functions_lifecycle import history, job as status


def test_a_copy_of_the_submission_delivered_after_the_job_succeeded_runs_nothing(functions, zen, publisher):
    functions.submit(job_request("job-1"), message_id="first")
    for beat in agent_run("job-1"):
        functions.heartbeat(beat)
    before = history(zen, "job-1")
    functions.submit(job_request("job-1"), message_id="first")  # Pub/Sub's redelivery
    functions.submit(job_request("job-1"), message_id="again")  # the client library's retried publish
    assert status(zen, "job-1").status.value == "SUCCEEDED"
    assert history(zen, "job-1") == before
    assert len(publisher.on("zen-job-start")) == 1


def test_a_copy_of_the_submission_after_an_early_stop_cancelled_it_runs_nothing(functions, zen, publisher):
    functions.stop({"job_id": "job-1", "reason": "changed my mind"})
    functions.submit(job_request("job-1"), message_id="first")
    functions.submit(job_request("job-1"), message_id="first")
    functions.stop({"job_id": "job-1", "reason": "changed my mind"})  # the stop's own copy
    assert status(zen, "job-1").status.value == "CANCELLED"
    assert history(zen, "job-1") == [(None, "PENDING"), ("PENDING", "CANCELLED")]
    assert publisher.on("zen-job-start") == []


def test_a_claim_delivered_before_its_submission_wins_nothing(functions, zen, publisher):
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.submit(job_request("job-1"))
    assert status(zen, "job-1").status.value == "QUEUED"
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 2, vm="vm-b"))
    record = status(zen, "job-1")
    assert (record.status.value, record.vm) == ("ASSIGNED", "vm-b")


def test_a_stop_delivered_after_the_preemption_that_requeued_the_job_still_ends_it(functions, zen, publisher):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "PREEMPTED", 3, vm="vm-a"))  # published before the user's stop
    assert (status(zen, "job-1").status.value, status(zen, "job-1").attempt) == ("QUEUED", 2)
    functions.stop({"job_id": "job-1", "reason": "changed my mind"})
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 4, attempt=2, vm="vm-b"))  # a copy of the start published again
    record = status(zen, "job-1")
    assert record.status.value == "CANCELLED"
    told = [json.loads(m.data) for m in publisher.on("zen-vm-control")]
    assert [c["action"] for c in told if c["vm"] == "vm-b"] == ["RELEASE"]  # the job never starts there
