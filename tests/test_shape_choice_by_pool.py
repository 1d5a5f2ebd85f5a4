"""A job of several acceptable GPU shapes (gpu_types) takes the first shape with a region where a stockout blocks
not every pool it may use (zen.jobs.placement.choose). The planner's memory, which says what is blocked, is kept per
pool (``us-central1`` for the primary model's pool, ``us-central1/spot`` for another's): compared with the shape's
bare regions, in a cluster of [standard, spot] a spot-only job was passed over to the next shape when only the
standard pools were blocked, and put on the shape whose every spot pool was blocked, because its standard pools
were not."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.messages import job_request
from zen.core.config import ZenConfig
from zen.store import fleet, repository

A100 = "4xa100-40gb"


@pytest.fixture
def two_models(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        cluster["provisioning"] = ["standard", "spot"]  # pools: us-central1 (standard), us-central1/spot, ...
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def _block(zen, clock, pools):
    until = (clock() + timedelta(minutes=10)).isoformat()
    with zen.db.transaction() as session:
        for pool in pools:
            fleet.save_scaling_memory(session, A100, pool, json.dumps({"blocked_until": until}), clock())


def _placed(zen, job_id):
    with zen.db.transaction() as session:
        job = repository.get_job(session, job_id)
        first = repository.job_history(session, job_id)[0]
    return job.cluster, first["reason"]


def test_a_spot_job_is_not_passed_over_for_blocked_standard_pools_it_never_uses(two_models, clock):
    zen, functions = two_models
    regions = zen.config.cluster(A100).regions
    _block(zen, clock, regions)  # the standard (primary) pools only: every spot pool has capacity
    functions.submit(job_request("s1", cluster=None, gpu_types=["nvidia-tesla-a100", "nvidia-l4"], gpu_count=1,
                                 provisioning="spot"))
    cluster, reason = _placed(zen, "s1")
    assert cluster == A100 and "stocked out" not in reason, (cluster, reason)


def test_a_spot_job_is_passed_over_where_every_spot_pool_is_blocked(two_models, clock):
    zen, functions = two_models
    regions = zen.config.cluster(A100).regions
    _block(zen, clock, [f"{r}/spot" for r in regions])  # every pool the spot job may use in 4xa100
    functions.submit(job_request("s2", cluster=None, gpu_types=["nvidia-tesla-a100", "nvidia-l4"], gpu_count=1,
                                 provisioning="spot"))
    cluster, reason = _placed(zen, "s2")
    assert cluster == "1xl4" and "4xa100-40gb: every allowed region is stocked out" in reason, (cluster, reason)
