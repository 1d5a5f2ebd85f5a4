"""Pub/Sub delivers a stop at least once: a copy of the stop that ended a job, delivered after that end, is a
duplicate (docs/explanations/delivery-guarantees.md). It was refused as "job is already CANCELLED": a row in
``rejected_messages``, a warning, and a ``job.message_ignored`` event telling the job's user and subscribers that
their stop was ignored, right after the event saying it cancelled the job. A stop the job was not ended by (another
reason) is still refused and recorded."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.test_given_back_claims import job
from zen.store import repository


def refusals(zen) -> list[tuple[str | None, str]]:
    with zen.db.transaction() as session:
        return [(row["job_id"], row["reason"]) for row in repository.list_rejections(session)]


def ignored(publisher, job_id: str) -> list[str]:
    return [json.loads(m.data)["reason"] for m in publisher.on("zen-job-events")
            if m.attributes.get("job_id") == job_id and m.attributes.get("type") == "job.message_ignored"]


def test_a_copy_of_the_stop_that_cancelled_a_queued_job_is_a_duplicate(functions, zen, publisher):
    functions.submit(job_request("q"))
    functions.stop({"job_id": "q", "reason": "wrong data"}, message_id="stop-q")
    functions.stop({"job_id": "q", "reason": "wrong data"}, message_id="stop-q")  # Pub/Sub's copy
    assert job(zen, "q").status.value == "CANCELLED"
    assert refusals(zen) == [], "a redelivery of the stop that cancelled the job was recorded as refused"
    assert ignored(publisher, "q") == [], "the job's user was told the stop that cancelled it was ignored"


def test_a_copy_of_the_stop_a_running_job_answered_is_a_duplicate(functions, zen, publisher):
    functions.submit(job_request("r"))
    functions.heartbeat(heartbeat("r", "CLAIMED", 1))
    functions.heartbeat(heartbeat("r", "RUNNING", 2))
    functions.stop({"job_id": "r"}, message_id="stop-r")
    functions.heartbeat(heartbeat("r", "STOPPED", 3, exit_code=143))
    functions.stop({"job_id": "r"}, message_id="stop-r")  # delivered again after the VM's answer ended the job
    assert job(zen, "r").status.value == "CANCELLED"
    assert refusals(zen) == [] and ignored(publisher, "r") == []


def test_a_copy_of_a_stop_the_job_finished_before_is_a_duplicate(functions, zen, publisher):
    functions.submit(job_request("s"))
    functions.heartbeat(heartbeat("s", "CLAIMED", 1))
    functions.heartbeat(heartbeat("s", "RUNNING", 2))
    functions.stop({"job_id": "s", "reason": "enough"}, message_id="stop-s")
    functions.heartbeat(heartbeat("s", "SUCCEEDED", 3, exit_code=0))  # it ended on its own as the stop came
    functions.stop({"job_id": "s", "reason": "enough"}, message_id="stop-s")
    assert job(zen, "s").status.value == "SUCCEEDED"
    assert refusals(zen) == [] and ignored(publisher, "s") == []


def test_another_stop_of_a_job_that_ended_is_still_refused_and_recorded(functions, zen, publisher):
    functions.submit(job_request("o"))
    functions.stop({"job_id": "o", "reason": "wrong data"})
    functions.stop({"job_id": "o", "reason": "and the wrong image"})
    assert refusals(zen) == [("o", "job is already CANCELLED")]
    assert ignored(publisher, "o") == ["job is already CANCELLED"]
