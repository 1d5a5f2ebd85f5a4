"""Data locality (zen.core.locality): a job's regions are ordered by where its inputs live, and zen explain
prices the egress; bucket locations come from the configuration or the Cloud Storage client."""

from __future__ import annotations

import json

import pytest

from tests.messages import job_request
from zen.core.config import ZenConfig
from zen.store import repository


@pytest.fixture
def located(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    raw["data"] = {"bucket_locations": {"eu-data": "europe-west4", "eu-multi": "EU", "us-multi": "US"}}
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def regions_of(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id).regions


def test_regions_are_ordered_by_where_the_inputs_are(located):
    zen, functions = located
    functions.submit(job_request("d1", inputs=[{"uri": "gs://eu-data/shards/", "size_gb": 120}]))
    functions.submit(job_request("d2", inputs=[{"uri": "gs://eu-multi/x"}]))
    functions.submit(job_request("d3", inputs=[{"uri": "gs://us-multi/x", "size_gb": 1},
                                               {"uri": "gs://eu-data/y", "size_gb": 10}]))
    functions.submit(job_request("d4"))
    assert regions_of(zen, "d1") == ["europe-west4", "us-central1", "us-west1"]
    assert regions_of(zen, "d2") == ["europe-west4", "us-central1", "us-west1"]
    assert regions_of(zen, "d3") == ["europe-west4", "us-central1", "us-west1"]  # 10 GB outweighs 1 GB
    assert regions_of(zen, "d4") == ["us-central1", "us-west1", "europe-west4"]  # no inputs: the cluster's


def test_zen_explain_shows_the_data_order_and_the_egress(located, db_url, tmp_path):
    import os
    import subprocess
    import sys

    import yaml

    zen, functions = located
    functions.submit(job_request("d5", inputs=[{"uri": "gs://eu-data/shards/", "size_gb": 120}],
                                 regions=["us-central1", "us-west1"]))
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(json.loads(zen.config.model_dump_json())))
    done = subprocess.run([sys.executable, "-m", "zen.cli.main", "explain", "d5"], capture_output=True, text=True,
                          env={"ZEN_CONFIG": str(path), "ZEN_DATABASE_URL": db_url, "PATH": "/usr/bin:/bin",
                               **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}},
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "data: regions ordered by input location (us-central1, us-west1); from us-central1 120 GB of input " \
           "cross regions, about $9.60 egress" in done.stdout  # 120 GB x $0.08 across the ocean


def test_a_bucket_location_is_looked_up_with_the_storage_client_when_not_configured(config, monkeypatch):
    from zen.core import locality
    from zen_dev.local.storage import StorageStandIn  # the GCS stand-in (STORAGE_EMULATOR_HOST)

    with StorageStandIn() as standin:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", standin.address)
        standin.state.create_bucket("far-data", location="ASIA")
        locality._looked_up.clear()
        assert locality.bucket_location(config, "far-data") == "asia"
        from zen.core.models import InputSpec

        assert locality.order_by_data(config, ["us-central1", "asia-northeast1"],
                                      [InputSpec(uri="gs://far-data/x")]) == ["asia-northeast1", "us-central1"]
        assert locality.bucket_location(config, "no-such-bucket") is None  # unknown: weighs nothing


def test_a_failed_lookup_is_tried_again_later_and_an_answer_is_kept(config, monkeypatch):
    """A lookup that failed (here: nothing listening) leaves the location unknown only for a while,
    and fails fast; an answer, "no such bucket" included, is kept."""
    import socket
    import time

    from zen.core import locality
    from zen_dev.local.storage import StorageStandIn

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setattr(locality, "_looked_up", {})
    monkeypatch.setattr(locality, "_failed_at", {}, raising=False)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", dead)
    began = time.monotonic()
    assert locality.bucket_location(config, "eu-data2") is None
    assert time.monotonic() - began < 7  # no retries on the submission path
    with StorageStandIn() as standin:
        standin.state.create_bucket("eu-data2", location="EUROPE-WEST4")
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", standin.address)
        assert locality.bucket_location(config, "eu-data2") is None  # within RETRY_UNKNOWN_S: not asked again
        monkeypatch.setattr(locality, "RETRY_UNKNOWN_S", 0.0, raising=False)
        assert locality.bucket_location(config, "eu-data2") == "europe-west4"  # asked again: found
        assert locality.bucket_location(config, "gone-bucket") is None  # an answer: no such bucket
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", dead)
    assert locality.bucket_location(config, "eu-data2") == "europe-west4"  # kept, not asked again
    assert "gone-bucket" in locality._looked_up


def test_a_dual_region_is_its_two_regions_and_a_multi_region_only_where_it_stores(config):
    """A bucket in NAM4 is near us-central1 and us-east1 only, in EU not near London or Zurich, in US not near
    Montreal: each was taken for as near as the bucket's own regions (the job started first in one 1 of 2 from its
    data, and `zen explain` priced the reads at the same multi-region's rate)."""
    from zen.core.locality import distance, order_by_data
    from zen.core.models import InputSpec

    raw = json.loads(config.model_dump_json())
    raw["data"] = {"bucket_locations": {"nam4-data": "NAM4", "eu-data": "EU", "us-data": "US", "eur4-data": "EUR4"}}
    located = ZenConfig.model_validate(raw)

    def order(regions, bucket):
        return order_by_data(located, regions, [InputSpec(uri=f"gs://{bucket}/x")])

    assert order(["us-west1", "us-east1"], "nam4-data") == ["us-east1", "us-west1"]
    assert order(["europe-west2", "europe-west1"], "eu-data") == ["europe-west1", "europe-west2"]
    assert order(["northamerica-northeast1", "us-east4"], "us-data") == ["us-east4", "northamerica-northeast1"]
    assert order(["europe-west1", "europe-north1"], "eur4-data") == ["europe-north1", "europe-west1"]
    assert [distance(r, "asia1") for r in ("asia-northeast2", "asia-east1")] == [0, 2]  # 2: the same continent
    assert [distance(r, "asia") for r in ("asia-east1", "australia-southeast1")] == [1, 3]


def test_every_predefined_dual_region_is_its_two_regions(config):
    """EUR5 (Belgium, London), EUR7 (London, Frankfurt) and EUR8 (Frankfurt, Zurich), as NAM4, EUR4 and ASIA1: a name
    Zen did not know was of no continent, every region 3 from it, so the job was not routed to its data and its reads
    there were priced as across an ocean."""
    from zen.core.locality import distance, egress_usd, nearest_regions
    from zen.core.models import InputSpec

    raw = json.loads(config.model_dump_json())
    raw["data"] = {"bucket_locations": {"eur5-data": "EUR5", "eur7-data": "EUR7", "eur8-data": "EUR8"}}
    located = ZenConfig.model_validate(raw)
    assert [distance(r, "eur5") for r in ("europe-west1", "europe-west2", "europe-west4")] == [0, 0, 2]
    assert [distance(r, "eur7") for r in ("europe-west2", "europe-west3", "us-east1")] == [0, 0, 3]
    assert [distance(r, "eur8") for r in ("europe-west3", "europe-west6", "europe-west1")] == [0, 0, 2]
    inputs = [InputSpec(uri="gs://eur8-data/shards/", size_gb=100)]
    assert nearest_regions(located, ["europe-west1", "europe-west6"], inputs) == ["europe-west6"]
    assert egress_usd(located, "europe-west4", inputs) == (100.0, 1.0, 0.0)  # the same continent's $0.01/GB


@pytest.mark.parametrize("location", ["us-east1,us-west1", "us-east1 + us-west1", "us-central1-a", "eur9"])
def test_a_configured_location_zen_cannot_place_by_is_refused_at_load(config, tmp_path, location):
    """gcloud's --placement form, spaces, a zone, a dual-region Zen does not know: each was of no region or continent,
    every region as far from it as the others, its jobs routed nowhere first and their reads priced as across an
    ocean."""
    import yaml

    from zen.core.config import load_config
    from zen.core.errors import ConfigError

    raw = json.loads(config.model_dump_json())
    raw["data"] = {"bucket_locations": {"pair-data": location, "eu-data": "EUROPE-WEST4", "pair2": "us-east1+us-west1"}}
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"pair-data: .* is no Cloud Storage location: give a region \(us-central1\)"):
        load_config(path)
    raw["data"]["bucket_locations"]["pair-data"] = "NAM4"
    path.write_text(yaml.safe_dump(raw))
    assert load_config(path).data.bucket_locations["eu-data"] == "EUROPE-WEST4"
