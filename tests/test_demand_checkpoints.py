"""A queued job that checkpoints is demand that says so: the planner prices preemptions by it."""

from __future__ import annotations

from datetime import datetime, timezone

from tests.messages import job_request
from zen.scaling.fleetdb import FleetDb


def test_queued_demand_says_which_jobs_checkpoint(config, db, publisher, clock):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    checkpointing = config.model_copy(update={"checkpoints": config.checkpoints.model_copy(update={"bucket": "ckpt"})})
    fn = FunctionsInvoker(Zen(checkpointing, db, publisher, clock))
    cluster = checkpointing.clusters[0]
    fn.submit(job_request("plain", cluster=cluster.name))
    fn.submit(job_request("saves", cluster=cluster.name, checkpoint={"every": 600}))
    facts = FleetDb(db, {c.name: c for c in checkpointing.clusters}).facts(cluster.name, datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert sorted((g.count, g.checkpoints) for g in facts.demand) == [(1, False), (1, True)]
