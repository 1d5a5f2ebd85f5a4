"""A VM heartbeat that names two stopped claims given back, crossing the final report of the second, in one queue,
through the functions against a real Postgres, each delivery in a thread of its own (two function instances):
job-1 and job-2 were claimed by vm-a and stopped while their claims' answers were on their way; job-3 waits for
their quota.

The VM heartbeat took the jobs it names in turn: job-1's row, then, ending it, its queue's lock (the admission pass),
then job-2's row. job-2's final report held job-2's row, then, ending it, wanted the queue's lock: a deadlock, and
Postgres failed one of the two (the function answered 500; Pub/Sub redelivered it later). The VM heartbeat now
locks every job it requeues or ends, in job id order, before it applies any."""

from __future__ import annotations

import pytest

from tests.crossing import cross
from tests.messages import agent_run, heartbeat, job_request
from tests.test_given_back_claims import T, vm_beat
from tests.test_queues import CLUSTER, queued_zen, statuses  # noqa: F401 - fixture

ONE_QUEUE = [{"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"]}]


@pytest.mark.queues(ONE_QUEUE)
@pytest.mark.parametrize("first", ["the VM heartbeat", "the report"])
def test_a_vm_heartbeat_giving_back_two_stopped_claims_and_the_second_ones_report_both_apply(queued_zen, db, first):
    zen, fn = queued_zen
    for name in ("job-1", "job-2", "job-3"):
        fn.submit(job_request(name, queue="research"))
    fn.heartbeat(heartbeat("job-1", "CLAIMED", T, vm="vm-a"))  # their CONFIRMs reach vm-a too late
    fn.heartbeat(heartbeat("job-2", "CLAIMED", T + 1, vm="vm-a"))
    fn.stop({"job_id": "job-1", "reason": "not needed"})
    fn.stop({"job_id": "job-2", "reason": "not needed"})
    assert statuses(zen, "job-1", "job-2", "job-3") == ["STOPPING", "STOPPING", "PENDING"]

    given_back = vm_beat("vm-a", T + 60_001, ("job-1", 1), ("job-2", 1))
    report = heartbeat("job-2", "STOPPED", T + 2, vm="vm-a", message="stopped before it started")
    both = {"the VM heartbeat": ("on_heartbeat", given_back, "vm"), "the report": ("on_heartbeat", report, "report")}
    # The VM heartbeat first: it holds job-1's row and the queue's lock, the report takes job-2's. The report first:
    # it holds job-2's row, not yet the queue's lock, which the VM heartbeat takes for job-1.
    assert cross(zen, fn, db, both, first, "queue_lock", before=first != "the VM heartbeat") == []
    assert statuses(zen, "job-1", "job-2", "job-3") == ["CANCELLED", "CANCELLED", "QUEUED"]


TWO_QUEUES = [{"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"]},
              {"name": "prod", "quota": {CLUSTER: 8}, "users": ["bob"]}]


@pytest.mark.queues(TWO_QUEUES)
@pytest.mark.parametrize("first", ["the VM heartbeat", "the end"])
def test_a_vm_heartbeat_giving_back_stopped_claims_of_two_queues_and_an_end_running_both_passes_both_apply(
        queued_zen, db, first):
    """job-1 (research) and job-2 (prod) given back, stopped: the VM heartbeat ran research's pass (job-1's end), then
    prod's (job-2's). etl's end (prod) lets score (research) go: it takes prod's lock, then research's (name order,
    ``DecisionWriter.lock_passes``). Each held the lock the other waited for. The VM heartbeat now takes the locks of
    the passes its changes run together, in name order, before it applies any."""
    zen, fn = queued_zen
    fn.submit(job_request("job-1", queue="research"))
    fn.submit(job_request("job-2", queue="prod"))
    fn.submit(job_request("etl", queue="prod"))
    fn.submit(job_request("score", queue="research", after=["etl"]))
    fn.heartbeat(heartbeat("job-1", "CLAIMED", T, vm="vm-a"))  # their CONFIRMs reach vm-a too late
    fn.heartbeat(heartbeat("job-2", "CLAIMED", T + 1, vm="vm-a"))
    fn.stop({"job_id": "job-1", "reason": "not needed"})
    fn.stop({"job_id": "job-2", "reason": "not needed"})
    run = agent_run("etl", vm="vm-e")
    for beat in run[:-1]:
        fn.heartbeat(beat)
    assert statuses(zen, "job-1", "job-2", "etl", "score") == ["STOPPING", "STOPPING", "RUNNING", "PENDING"]

    given_back = vm_beat("vm-a", T + 60_001, ("job-1", 1), ("job-2", 1))
    both = {"the VM heartbeat": ("on_heartbeat", given_back, "vm"), "the end": ("on_heartbeat", run[-1], "etl-end")}
    assert cross(zen, fn, db, both, first, "queue_lock") == []  # the second starts once the first holds a queue's lock
    assert statuses(zen, "job-1", "job-2", "etl", "score") == ["CANCELLED", "CANCELLED", "SUCCEEDED", "QUEUED"]
