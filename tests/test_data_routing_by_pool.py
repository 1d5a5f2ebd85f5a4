"""A data job's first start skips its data's region where a stockout blocks every pool the job may use
(zen.core.routing.first_route, fed ``blocked_regions``: the planner's memory, kept per pool). Compared with bare
regions, in a cluster of [spot, standard] (spot the primary: its pools are the bare regions) a standard-only data
job was sent everywhere, away from its data, when only the spot pool of its data's region was blocked, and sent to
its data's region alone, where it could only wait, when its one pool there (``europe-west4/standard``) was."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.messages import job_request
from zen.core.config import ZenConfig
from zen.store import fleet, repository

DATA = [{"uri": "gs://eu-data/shards/", "size_gb": 120}]
CLUSTER = "4xa100-40gb"


@pytest.fixture
def routed(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    raw["data"] = {"bucket_locations": {"eu-data": "europe-west4"}, "route_min_gb": 10}
    raw["deadlines"]["data_wait_s"] = 30
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster["provisioning"] = ["spot", "standard"]
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def _block(zen, clock, pool):
    until = (clock() + timedelta(minutes=3)).isoformat()
    with zen.db.transaction() as session:
        fleet.save_scaling_memory(session, CLUSTER, pool, json.dumps({"blocked_until": until}), clock())


def _start_regions(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id).start_regions


def test_a_standard_job_goes_to_its_data_when_only_the_spot_pool_there_is_blocked(routed, clock):
    zen, functions = routed
    _block(zen, clock, "europe-west4")  # the spot pool (primary: bare key); europe-west4/standard has capacity
    functions.submit(job_request("d-std", inputs=DATA, provisioning="standard"))
    assert _start_regions(zen, "d-std") == ["europe-west4"]


def test_a_standard_job_is_not_sent_only_where_its_one_pool_is_blocked(routed, clock):
    zen, functions = routed
    _block(zen, clock, "europe-west4/standard")  # the only pool the job may use in its data's region
    functions.submit(job_request("d-std2", inputs=DATA, provisioning="standard"))
    assert _start_regions(zen, "d-std2") is None  # as for a one-model cluster: not narrowed to where it only waits
