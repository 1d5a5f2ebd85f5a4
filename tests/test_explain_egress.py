"""`zen explain`'s egress (zen.cli.queues._data_line, zen.core.locality.egress_usd):
- for a gang it counts every node's copy: every node stages every input (zen.agent.prestart gives each node's
  AttemptData all the start's inputs), so a 2-node gang reading 120 GB of europe-west4 data in us-central1 moves
  240 GB across regions; explain said 120 GB and half the dollars;
- an input whose bucket location is unknown (no data.bucket_locations entry and a lookup that failed or was
  refused: deployed, the functions may look up agent_input_buckets only) is named apart: it was priced as if in
  the job's own region, "0 GB of input cross regions, about $0.00 egress", its regions "ordered by input
  location", for data whose location nobody knew."""

from __future__ import annotations

import json

import pytest

from tests.messages import job_request
from zen.core.config import ZenConfig
from zen.store import repository

DATA = [{"uri": "gs://eu-data/shards/", "size_gb": 120}]


@pytest.fixture
def located(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen.core import locality
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    raw["data"] = {"bucket_locations": {"eu-data": "europe-west4", "nam4-data": "NAM4"}}
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    # A bucket nobody can look up (as deployed for a bucket outside agent_input_buckets): unknown location.
    monkeypatch.setattr(locality, "_looked_up", {"far-away-data": None})
    return zen, FunctionsInvoker(zen)


def why(zen, job_id: str) -> str:
    from zen.cli.queues import explain_line

    with zen.db.transaction() as session:
        return explain_line(session, zen.config, repository.get_job(session, job_id))


def test_a_gangs_egress_counts_every_node_staging_the_inputs(located):
    zen, functions = located
    functions.submit(job_request("g1", nodes=2, inputs=DATA, regions=["us-central1", "us-west1"]))
    with zen.db.transaction() as session:
        assert repository.get_job(session, "g1").nodes == 2
    line = why(zen, "g1")
    assert "from us-central1 240 GB of input cross regions, about $19.20 egress" in line, line


def test_an_input_of_unknown_location_is_not_priced_as_free(located):
    zen, functions = located
    functions.submit(job_request("u1", inputs=[{"uri": "gs://far-away-data/shards/", "size_gb": 500}]))
    line = why(zen, "u1")
    assert "0 GB of input cross regions, about $0.00 egress" not in line, line


def test_a_dual_regions_data_read_in_one_of_its_regions_crosses_none(located):
    """A bucket in the dual-region NAM4 stores its data in us-central1 and us-east1: Cloud Storage charges no
    transfer for a read from either. Explain said "from us-central1 100 GB of input cross regions, about $1.00
    egress" (the multi-region rate), for data stored in that region."""
    zen, functions = located
    functions.submit(job_request("d1", inputs=[{"uri": "gs://nam4-data/shards/", "size_gb": 100}],
                                 regions=["us-west1", "us-central1"]))
    line = why(zen, "d1")
    assert "from us-central1 0 GB of input cross regions, about $0.00 egress" in line, line
