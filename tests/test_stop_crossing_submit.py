"""A stop and its job's submission handled at the same moment: the stop's transaction found no job and kept the
stop; the submission's statement, begun before that commit, did not see it; the stop's check after its commit
ran before the submission's commit. The job stayed QUEUED with the stop kept, a VM claimed and ran it, and only
the next tick's sweep stopped it. The claim comes after the submission's commit, so it sees the kept stop: it
is applied first, the claim answered RELEASE, and the job never starts."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from zen.store import repository


def test_a_stop_kept_beside_a_queued_job_cancels_it_at_the_first_claim(functions, zen, publisher):
    functions.submit(job_request("crossed"))
    with zen.db.transaction() as session:  # what the crossing leaves: the job QUEUED, its stop kept
        session.run("insert_early_stop", job_id="crossed", reason="not needed", now=job(zen, "crossed").submitted_at,
                    principal=None)
    functions.heartbeat(heartbeat("crossed", "CLAIMED", 1, vm="vm-a"))
    assert job(zen, "crossed").status.value == "CANCELLED"
    with zen.db.transaction() as session:
        last = repository.job_history(session, "crossed")[-1]
    assert (last["to_status"], last["actor"]) == ("CANCELLED", "user") and "not needed" in last["reason"]
    [answer] = [json.loads(m.data) for m in publisher.on("zen-vm-control")]
    assert (answer["vm"], answer["action"]) == ("vm-a", "RELEASE")


def test_a_claim_of_a_job_with_no_kept_stop_is_decided_as_before(functions, zen, publisher):
    functions.submit(job_request("plain"))
    functions.heartbeat(heartbeat("plain", "CLAIMED", 1, vm="vm-a"))
    assert job(zen, "plain").status.value == "ASSIGNED"
