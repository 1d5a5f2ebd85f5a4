"""A queued job that checkpoints is demand that says how often: the planner prices a pool's preemptions by
the job's own interval (zen.scaling.preemptions)."""

from __future__ import annotations

from datetime import datetime, timezone

from tests.messages import job_request
from zen.core.checkpoints import CheckpointSpec
from zen.scaling.fleetdb import FleetDb
from zen.scaling.preemptions import cost_factor
from zen.scaling.model import RegionMemory


def test_queued_demand_carries_each_jobs_checkpoint_interval(config, db, publisher, clock):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    checkpointing = config.model_copy(update={"checkpoints": config.checkpoints.model_copy(update={"bucket": "ckpt"})})
    fn = FunctionsInvoker(Zen(checkpointing, db, publisher, clock))
    cluster = checkpointing.clusters[0]
    fn.submit(job_request("plain", cluster=cluster.name))
    fn.submit(job_request("often", cluster=cluster.name, checkpoint={"every": 60}))
    fn.submit(job_request("hourly", cluster=cluster.name, checkpoint={"every": 3600}))
    fn.submit(job_request("default", cluster=cluster.name, checkpoint={}))
    facts = FleetDb(db, {c.name: c for c in checkpointing.clusters}).facts(cluster.name, datetime(2026, 1, 1, tzinfo=timezone.utc))
    every = sorted((g.checkpoint_every_s or 0, g.count) for g in facts.demand)
    # the migration's default for a checkpoint without `every` is CheckpointSpec's
    assert every == [(0, 1), (60, 1), (600, 1), (3600, 1)]
    assert CheckpointSpec().every == 600


def test_a_pools_preemptions_cost_a_job_by_its_own_interval():
    # 8 busy hours, 4 runs cut short after 30 min each on average
    memory = RegionMemory().replaced(busy_s=3600.0 * 8, lost_s=4 * 1800.0, preempted=4.0)
    never, often, rarely = (cost_factor(memory, every, 90.0, now_s=0.0, prior_s=0.0) for every in (None, 60.0, 1800.0))
    assert often < rarely < never  # every minute loses ~30 s a preemption, every half hour ~15 min, never the run so far
    assert often == 3600 * 8 / (3600 * 8 - 4 * (30 + 90))



def test_queued_demand_carries_its_longest_max_runtime_and_agents_their_first_word(config, db, publisher, clock):
    """What the planner needs to count no flex-start VM whose run ends first (zen.scaling.flexrun): each demand
    group's longest ``max_runtime_s`` (None: no job named one), each agent's first word (``first_seen_at``)."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    fn = FunctionsInvoker(Zen(config, db, publisher, clock))
    cluster = config.clusters[0]
    fleet = FleetDb(db, {c.name: c for c in config.clusters})
    since = datetime(2026, 1, 1, tzinfo=timezone.utc)
    fn.submit(job_request("unbounded", cluster=cluster.name))
    assert [(g.count, g.longest_s) for g in fleet.facts(cluster.name, since).demand] == [(1, None)]
    fn.submit(job_request("short", cluster=cluster.name, max_runtime_s=600))
    fn.submit(job_request("long", cluster=cluster.name, max_runtime_s=7200))
    assert [(g.count, g.longest_s) for g in fleet.facts(cluster.name, since).demand] == [(3, 7200.0)]
    fn.heartbeat({"kind": "vm", "vm": "vm-a", "cluster": cluster.name, "region": cluster.regions[0],
                  "zone": f"{cluster.regions[0]}-a", "state": "IDLE", "seq": 1, "sent_at": clock().isoformat()})
    assert fleet.facts(cluster.name, since).agents["vm-a"]["first_seen_at"] is not None
