"""Dependencies (zen.core.dependencies) in a queue with quota, through the functions against a real Postgres:
the end that lets a waiting job go (or cancels it) counts in its queue's fair-share usage, as any end does (an
array's stop too)."""

from __future__ import annotations

import pytest

from tests.messages import agent_run, job_request
from tests.test_queues import CLUSTER, COHORT, ONE_QUEUE, queued_zen, statuses  # noqa: F401 - fixture
from zen.jobs.queueing import decay
from zen.store import queues as queue_rows


@pytest.mark.queues(ONE_QUEUE)
@pytest.mark.parametrize("waiting", [False, True])
def test_an_end_that_lets_a_dependent_go_still_counts_in_its_queues_usage(queued_zen, clock, waiting):
    """A job's end runs its queue's admission pass, which adds the GPUs the job held since the last pass to
    the queue's usage (fair sharing). The job that waited for it was let go, and its own pass run, first: that
    pass brought the usage up to date without the ended job's GPUs, and the 30 minutes the job held 4 GPUs
    counted for nothing (its queue then took more than its share of the cohort)."""
    zen, functions = queued_zen
    functions.submit(job_request("prep"))  # admitted now: its queue's usage brought up to date, 0 held
    if waiting:
        functions.submit(job_request("train", after=["prep"]))
    beats = agent_run("prep")
    for beat in beats[:-1]:
        functions.heartbeat(beat)
    clock.advance(1800)
    functions.heartbeat(beats[-1])
    assert statuses(zen, "prep", *(["train"] if waiting else [])) == ["SUCCEEDED"] + (["QUEUED"] if waiting else [])
    with zen.db.transaction() as session:
        gpu_seconds, _ = queue_rows.usage(session, ["research"])[("research", CLUSTER)]
    assert gpu_seconds == pytest.approx(decay(0.0, 1800, 4, zen.config.queueing.usage_half_life_s), rel=1e-6)


@pytest.mark.queues(COHORT)  # alice's queue is team-a; anyone may submit to team-b
@pytest.mark.parametrize("queue,after,condition", [
    ("team-b", "arr", "any"),  # let go by the array's end
    ("team-b", "arr", "ok"),  # cancelled by it
    ("team-b", "arr-0", "any"),  # let go by one task's end, the other still held
    ("team-a", "arr", "any"),
])
def test_an_arrays_stop_that_lets_a_dependent_go_still_counts_in_its_queues_usage(queued_zen, clock, queue, after,
                                                                                    condition):
    """A stop that names an array ends its admitted tasks at once and runs their queue's pass after, with the GPUs
    they held (``released``). A job waiting for the array (or one task) in another queue of the cohort had its pass
    run first, within the task's end: it brought the cohort's usage up to date without the tasks' GPUs, and the
    30 minutes the array held 8 GPUs counted for nothing."""
    zen, functions = queued_zen
    functions.submit(job_request("arr", array={"count": 2}))  # admitted: 2 tasks of 4 GPUs
    functions.submit(job_request("next", queue=queue, after=[after], after_condition=condition))
    assert statuses(zen, "arr-0", "arr-1", "next") == ["QUEUED", "QUEUED", "PENDING"]
    clock.advance(1800)
    functions.stop({"job_id": "arr"})
    assert statuses(zen, "arr-0", "arr-1", "next") == ["CANCELLED", "CANCELLED",
                                                       "QUEUED" if condition == "any" else "CANCELLED"]
    with zen.db.transaction() as session:
        gpu_seconds, _ = queue_rows.usage(session, ["team-a"])[("team-a", CLUSTER)]
    assert gpu_seconds == pytest.approx(decay(0.0, 1800, 8, zen.config.queueing.usage_half_life_s), rel=1e-6)
