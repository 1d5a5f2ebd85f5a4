"""Fair sharing counts the GPUs a queue held until they were given back ("the same however often passes ran":
docs/how-to/queues.md), an array's tasks stopped by the array's id too. That stop ran its queue's pass with no
``released`` (each task's stop applied with ``admit=False``), so every GPU-second its admitted tasks held since the
last pass was dropped: two 4-GPU jobs held for an hour weighed 5.8 GPU-hours stopped one by one, 0 as an array's
tasks, and that queue went first in its cohort as though it had used nothing."""

from __future__ import annotations

import math

import pytest

from tests.messages import job_request
from tests.test_queues import COHORT, queued_zen, statuses  # noqa: F401 - fixture
from zen.jobs.queueing import Queueing
from zen.store.jobstore import PostgresJobTx

HELD = 8 * 0.5 / math.log(2)  # 8 GPUs for one half-life (an hour), each second decayed: GPU-hours


def recent_hours(zen, clock):
    with zen.db.transaction() as session:
        return {r["queue"]: r["recent_gpu_hours"] for r in Queueing(zen.config).summary(PostgresJobTx(session), clock())}


@pytest.mark.queues(COHORT)
def test_jobs_stopped_one_by_one_count_the_hour_they_held(queued_zen, clock):
    zen, functions = queued_zen
    for job_id in ("j0", "j1"):
        functions.submit(job_request(job_id))
    assert statuses(zen, "j0", "j1") == ["QUEUED", "QUEUED"]
    clock.advance(3600)
    for job_id in ("j0", "j1"):
        functions.stop({"job_id": job_id})
    assert recent_hours(zen, clock)["team-a"] == pytest.approx(HELD, abs=0.01)  # passes


@pytest.mark.queues(COHORT)
def test_an_arrays_tasks_stopped_by_its_id_count_the_hour_they_held(queued_zen, clock):
    zen, functions = queued_zen
    functions.submit(job_request("arr", array={"count": 2}))
    assert statuses(zen, "arr-0", "arr-1") == ["QUEUED", "QUEUED"]
    clock.advance(3600)
    functions.stop({"job_id": "arr"})
    assert statuses(zen, "arr-0", "arr-1") == ["CANCELLED", "CANCELLED"]
    assert recent_hours(zen, clock)["team-a"] == pytest.approx(HELD, abs=0.01)  # fails: 0.0
