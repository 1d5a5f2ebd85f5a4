"""Fair-share usage while a queue holds more than its lowered quota: a job's end is a step in what its queue
held, and its GPUs count until that end (docs/how-to/queues.md, Order) even where the end leaves no room to
admit anyone."""

from __future__ import annotations

import math

import pytest

from tests.messages import job_request
from tests.test_queues import run_to_end, statuses, with_queues
from zen.jobs.queueing import Queueing
from zen.store.jobstore import PostgresJobTx

RESEARCH = {"name": "research", "quota": {"4xa100-40gb": 8}, "users": ["alice"]}


def _zen(config, db, publisher, clock, quota):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(with_queues(config, [{**RESEARCH, "quota": {"4xa100-40gb": quota}}]), db, publisher, clock)
    return zen, FunctionsInvoker(zen)


def test_an_end_that_leaves_a_queue_at_its_lowered_quota_still_counts_in_its_usage(config, db, publisher, clock):
    """8 GPUs held for an hour, the quota lowered to 4 meanwhile, then one 4-GPU job ends: its pass found no room
    and returned before bringing the usage up to date, so the hour was later counted as 4 GPUs (the 4 held after
    the end): fair sharing saw half of what the queue used."""
    zen, functions = _zen(config, db, publisher, clock, 8)
    functions.submit(job_request("r0"))
    functions.submit(job_request("r1"))
    assert statuses(zen, "r0", "r1") == ["QUEUED", "QUEUED"]
    lowered, lowered_functions = _zen(config, db, publisher, clock, 4)
    clock.advance(3600)
    run_to_end(lowered_functions, "r0", "vm-0")
    assert statuses(lowered, "r0", "r1") == ["SUCCEEDED", "QUEUED"]
    with lowered.db.transaction() as session:
        hours = {r["queue"]: r["recent_gpu_hours"] for r in Queueing(lowered.config).summary(PostgresJobTx(session),
                                                                                             clock())}
    assert hours["research"] == pytest.approx(4 / math.log(2), abs=0.01)  # 8 GPUs for an hour, each second decayed
