"""In a cluster whose VMs run several jobs (max_jobs_per_vm > 1), the jobs past their start bound are a demand group
apart from the others (zen.scaling.sharing.absorb), and those within it count only the VMs packing them beside the
late ones adds: packed apart, two 2-GPU jobs that one 4-GPU VM of two slots holds, one queued past its bound and one
just submitted, asked for two VMs. Demand read from the real database (FleetDb.shared_load), planned by ZenPlanner."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.messages import job_request
from zen.core.config import ZenConfig
from zen.scaling.fleetdb import FleetDb
from zen.scaling.model import ClusterLimits, ClusterSnapshot, RegionMemory, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.sharing import absorb

CLUSTER = "4xa100-40gb"
REGION = "us-central1"


@pytest.fixture
def stack(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster.update(provisioning=["spot"], regions=[REGION], max_start_wait_s=600, max_jobs_per_vm=2)
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def _two_gpus(job_id):
    return job_request(job_id, cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=2, regions=[REGION],
                       max_start_wait_s=600)


def test_two_jobs_one_vm_holds_ask_one_vm_whether_or_not_one_is_past_its_bound(stack, clock):
    zen, functions = stack
    cluster = zen.config.cluster(CLUSTER)
    functions.submit(_two_gpus("old"))
    clock.advance(700)  # past its 600 s bound (held by max_vms, a stockout...)
    functions.submit(_two_gpus("new"))
    fleet = FleetDb(zen.db, {CLUSTER: cluster})
    rows, loads = fleet.shared_load(CLUSTER, clock())
    demand = absorb(rows, loads, (), cluster.gpu_count, cluster.max_jobs_per_vm)
    memory = {REGION: RegionMemory(last_boot_at=clock() - timedelta(seconds=60))}
    snapshot = ClusterSnapshot(now=clock(), cluster=ClusterLimits(CLUSTER, (REGION,), 8, 8), queued=(), vms=(),
                               target_sizes={REGION: 0}, memory=memory,
                               timing=Timing(spare_boots=False, max_start_wait_s=600), demand=demand)
    plan = ZenPlanner().plan(snapshot)
    assert sum(g.count for g in demand) == 1 and sum(plan.add.values()) == 1, (
        f"two 2-GPU jobs a 4-GPU VM of 2 slots holds: demand {demand}, asked {plan.add}; "
        f"{[d.reason for d in plan.decisions]}")
