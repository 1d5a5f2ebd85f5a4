"""A stop of an array and the array's submission handled at the same moment: the stop found no task and was kept
under the array's id; the submission, begun before that commit, did not see it; the stop's check after its commit
ran before the submission's commit. The tasks were QUEUED with the stop kept, and a VM's claim of one, which looked
for a stop kept under the task's own id only, won it: the task started, and ran until the next tick's sweep
stopped it. The claim sees the stop kept for its array as it sees one kept for its job: it is applied first (to
every task of the array), the claim is answered RELEASE, and no task starts."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from zen.store import repository


def keep_stop(zen, name: str, reason: str) -> None:
    """What the crossing leaves: the stop kept under ``name``, beside the jobs it names, not applied."""
    with zen.db.transaction() as session:
        session.run("insert_early_stop", job_id=name, reason=reason, now=job(zen, f"{name}-0").submitted_at,
                    principal=None)


def test_a_stop_kept_beside_a_queued_array_cancels_it_at_the_first_claim_of_a_task(functions, zen, publisher):
    functions.submit(job_request("sweep", array={"count": 3, "max_parallel": 2}))
    keep_stop(zen, "sweep", "wrong data")
    functions.heartbeat(heartbeat("sweep-1", "CLAIMED", 1, vm="vm-a"))
    assert [job(zen, f"sweep-{i}").status.value for i in range(3)] == ["CANCELLED"] * 3
    with zen.db.transaction() as session:
        last = repository.job_history(session, "sweep-1")[-1]
    assert last["to_status"] == "CANCELLED" and "wrong data" in last["reason"]
    [answer] = [json.loads(m.data) for m in publisher.on("zen-vm-control")]
    assert (answer["vm"], answer["job_id"], answer["action"]) == ("vm-a", "sweep-1", "RELEASE")


def test_a_stop_kept_for_a_job_named_as_a_task_would_be_leaves_another_jobs_claim_alone(functions, zen):
    """``run-1`` is a job of no array: a stop kept for ``run`` (a job not submitted yet) is not its."""
    functions.submit(job_request("run-1"))
    with zen.db.transaction() as session:
        session.run("insert_early_stop", job_id="run", reason="not this one", now=job(zen, "run-1").submitted_at,
                    principal=None)
    functions.heartbeat(heartbeat("run-1", "CLAIMED", 1, vm="vm-a"))
    assert job(zen, "run-1").status.value == "ASSIGNED"
