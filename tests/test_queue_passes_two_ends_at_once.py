"""Two ends at once in two queues of no common cohort, each letting go a job that waits for it in the other's
queue, through the functions against a real Postgres, each final report in a thread of its own (two function
instances): prep (research) and etl (prod) run; train (prod) waits for prep, score (research) for etl.

An end runs its own queue's admission pass first, then the passes of the jobs it let go (``DecisionWriter.apply``):
prep's end took research's lock, then prod's; etl's end took prod's, then research's. Each held the lock the other
waited for: a deadlock, and Postgres failed one of the two reports (the function answered 500; Pub/Sub redelivered
it later). The queues' locks of every pass an end runs are now taken together, in name order, before the first."""

from __future__ import annotations

import pytest

from tests.crossing import cross
from tests.messages import agent_run, job_request
from tests.test_queues import CLUSTER, queued_zen, statuses  # noqa: F401 - fixture

TWO_QUEUES = [{"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"]},
              {"name": "prod", "quota": {CLUSTER: 8}, "users": ["bob"]}]


@pytest.mark.queues(TWO_QUEUES)
@pytest.mark.parametrize("first", ["prep", "etl"])
def test_two_ends_letting_go_each_others_queues_jobs_both_apply(queued_zen, db, first):
    zen, fn = queued_zen
    fn.submit(job_request("prep", queue="research"))
    fn.submit(job_request("etl", queue="prod"))
    fn.submit(job_request("train", queue="prod", after=["prep"]))
    fn.submit(job_request("score", queue="research", after=["etl"]))
    runs = {"prep": agent_run("prep", vm="vm-p"), "etl": agent_run("etl", vm="vm-e")}
    for beat in runs["prep"][:-1] + runs["etl"][:-1]:
        fn.heartbeat(beat)
    assert statuses(zen, "prep", "etl", "train", "score") == ["RUNNING", "RUNNING", "PENDING", "PENDING"]

    ends = {name: ("on_heartbeat", run[-1], f"{name}-end") for name, run in runs.items()}
    assert cross(zen, fn, db, ends, first, "queue_lock") == []  # the second starts once the first holds a queue's lock
    assert statuses(zen, "prep", "etl", "train", "score") == ["SUCCEEDED", "SUCCEEDED", "QUEUED", "QUEUED"]
