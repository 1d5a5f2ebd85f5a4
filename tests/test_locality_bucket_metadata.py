"""Where Zen learns a bucket is (zen.core.locality.location_of, bucket_location), from the bucket's metadata as the
Cloud Storage client reads it from the storage stand-in:
- a configurable dual-region's ``location`` is the multi-region it lies in (``US``, ``locationType`` dual-region) and
  its two regions are in ``customPlacementConfig.dataLocations``: read as ``US``, every us-* region was as near as its
  own two, so a job on us-east1+us-west1 data was ordered to us-central1 first (the cluster's order) and its reads
  there priced as the multi-region's;
- a bucket whose metadata its reader may not get (403: a grant on the objects alone) is of unknown location: the job
  is placed as one without located inputs, not refused;
- an answer is asked again after ``KEEP_ANSWER_S``: a bucket relocated, or not found and created since, was placed by
  the first answer for as long as the process lived."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from zen.core.models import InputSpec


@pytest.fixture
def standin(monkeypatch):
    from zen.core import locality
    from zen_dev.local.storage import StorageStandIn  # the GCS stand-in (STORAGE_EMULATOR_HOST)

    monkeypatch.setattr(locality, "_looked_up", {})
    monkeypatch.setattr(locality, "_failed_at", {})
    monkeypatch.setattr(locality, "_answered_at", {})
    with StorageStandIn() as running:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", running.address)
        yield running


def test_a_configurable_dual_region_is_its_two_regions_not_its_multi_region(config, standin):
    from zen.core.locality import bucket_location, egress_usd, order_by_data

    standin.state.create_bucket("pair-data", location="US", data_locations=["US-EAST1", "US-WEST1"])
    standin.state.create_bucket("us-data", location="US")
    assert bucket_location(config, "pair-data") == "us-east1+us-west1"
    assert bucket_location(config, "us-data") == "us"  # a multi-region stays one
    inputs = [InputSpec(uri="gs://pair-data/shards/", size_gb=100)]
    assert order_by_data(config, ["us-central1", "us-west1"], inputs) == ["us-west1", "us-central1"]
    assert egress_usd(config, "us-west1", inputs) == (0.0, 0.0, 0.0)  # stored there: nothing crosses


def test_a_bucket_whose_metadata_is_refused_leaves_the_job_placed_without_its_location(config, standin):
    from zen.core.locality import bucket_location, egress_usd
    from zen.core.models import JobRequest
    from zen.jobs.placement import resolve_request

    standin.state.create_bucket("locked-data", location="EUROPE-WEST4")
    standin.state.deny("bucket:locked-data", 403, "zen-fn@ does not have storage.buckets.get access")
    assert bucket_location(config, "locked-data") is None
    request = JobRequest.model_validate(job_request("locked-1", inputs=[{"uri": "gs://locked-data/x", "size_gb": 50}]))
    resolved = resolve_request(config, request)
    assert resolved.regions == list(config.cluster(request.cluster).regions)  # the cluster's order: no preference
    assert egress_usd(config, resolved.regions[0], request.inputs) == (0.0, 0.0, 50.0)  # named apart, not priced


def test_an_answer_is_asked_again_after_a_while_and_kept_while_cloud_storage_fails(config, standin, monkeypatch):
    from zen.core import locality
    from zen.core.locality import bucket_location, order_by_data

    standin.state.create_bucket("moving-data", location="EUROPE-WEST4")
    assert bucket_location(config, "moving-data") == "europe-west4"
    assert bucket_location(config, "later-data") is None  # no such bucket yet
    standin.state.locations["moving-data"] = "US-WEST1"  # relocated (Cloud Storage's bucket relocation)
    standin.state.create_bucket("later-data", location="US-WEST1")
    assert bucket_location(config, "moving-data") == "europe-west4"  # within KEEP_ANSWER_S: not asked again
    monkeypatch.setattr(locality, "KEEP_ANSWER_S", 0.0)
    assert bucket_location(config, "moving-data") == "us-west1"
    assert bucket_location(config, "later-data") == "us-west1"
    inputs = [InputSpec(uri="gs://moving-data/shards/", size_gb=100)]
    assert order_by_data(config, ["europe-west4", "us-west1"], inputs) == ["us-west1", "europe-west4"]
    standin.state.deny("bucket:moving-data", 503, "Service Unavailable")
    assert bucket_location(config, "moving-data") == "us-west1"  # a failed lookup keeps the last answer
