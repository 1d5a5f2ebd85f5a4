"""A scaling pass prices its demand's inputs with the bucket locations the configuration names, never asking Cloud
Storage (``zen.scaling.egress.known_location``). A lookup waits up to ``LOOKUP_TIMEOUT_S`` (5 s) each, a failed one is
tried again after 300 s: a pass that looked up 50 buckets of unknown location, with Cloud Storage slow, would spend
minutes inside its transaction, every cluster's scaling held behind it. A bucket the configuration does not name
contributes nothing, looked up elsewhere in the process or not; without any named, the pass reads no inputs at all
(``weighs_inputs``)."""

from __future__ import annotations

from datetime import datetime, timezone

from tests.test_locality_bucket_metadata import standin  # noqa: F401 - the Cloud Storage stand-in, lookups forgotten
from zen.core.locality import bucket_location
from zen.scaling.egress import weighs_inputs
from zen.scaling.fleetdb import demand_groups

OLDEST = datetime(2026, 12, 1, tzinfo=timezone.utc)
ROW = {"priority": 0, "regions": ["europe-west4", "us-central1"], "jobs": 1, "oldest": OLDEST,
       "inputs": [[{"uri": "gs://eu-unlisted/shards/", "size_gb": 2000}]]}


def test_a_pass_prices_no_bucket_it_would_have_to_look_up(config, standin):
    standin.state.create_bucket("eu-unlisted", location="EUROPE-WEST4")  # not in data.bucket_locations
    cluster = config.cluster("8xa100-40gb")
    [group] = demand_groups([ROW], cluster, config)
    assert group.egress == (), group  # not asked: its location unknown to the pass
    assert bucket_location(config, "eu-unlisted") == "europe-west4"  # as a submission in this process looks it up
    [group] = demand_groups([ROW], cluster, config)
    assert group.egress == (), group  # still: what a pass prices does not hang on what the process asked before
    named = config.model_copy(update={"data": config.data.model_copy(
        update={"bucket_locations": {"eu-unlisted": "EUROPE-WEST4"}})})
    assert weighs_inputs(named) and not weighs_inputs(config)
    [group] = demand_groups([ROW], cluster, named)
    assert dict(group.egress) == {"europe-west4": 0.0, "us-central1": 160.0}, group


def test_none_and_empty_inputs_and_an_unlisted_bucket_price_nothing(config, standin):
    cluster = config.cluster("8xa100-40gb")
    rows = [{**ROW, "inputs": None}, {**ROW, "inputs": []}, {**ROW, "inputs": [None, []]},
            {**ROW, "inputs": [[{"uri": "gs://nowhere-known/x"}]]}]
    for row in rows:
        [group] = demand_groups([row], cluster, config)
        assert group.egress == (), (row, group)
