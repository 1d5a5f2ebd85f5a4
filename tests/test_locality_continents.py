"""Cloud Storage bills a read from another region of the bucket's continent below one across continents
(zen.core.locality.distance, data.egress_usd_per_gb.same_continent): a us-east1 bucket read in us-central1 is not
priced, nor ordered, like one read in europe-west4."""

from __future__ import annotations

import json

from zen.core.config import ZenConfig
from zen.core.locality import continent, distance, egress_usd, order_by_data
from zen.core.models import InputSpec

RATES = {"same_region": 0.0, "same_multi_region": 0.01, "same_continent": 0.02, "other": 0.08}


def priced(config, rates=RATES) -> ZenConfig:
    raw = json.loads(config.model_dump_json())
    raw["data"] = {"egress_usd_per_gb": rates,
                   "bucket_locations": {"east": "us-east1", "us-multi": "US", "nam4-data": "NAM4",
                                        "pair": "europe-west1+europe-west4"}}
    return ZenConfig.model_validate(raw)


def usd(config, region, bucket, gb=100.0):
    return egress_usd(config, region, [InputSpec(uri=f"gs://{bucket}/x", size_gb=gb)])


def test_a_region_of_the_buckets_continent_is_nearer_than_one_across_an_ocean():
    assert distance("us-central1", "us-east1") == 2
    assert distance("europe-west4", "us-east1") == 3
    assert distance("us-central1", "us") == 1
    assert distance("us-west1", "nam4") == 2
    assert distance("northamerica-northeast1", "us") == 2  # the US multi-region stores nothing in Canada
    assert distance("europe-west2", "eu") == 2  # nor EU in London
    assert distance("europe-north1", "europe-west1+europe-west4") == 2
    assert distance("australia-southeast1", "asia") == 3
    assert [continent(c) for c in ("me-central1", "africa-south1", "southamerica-east1", "asia1", "eur4")] == [
        "middle-east", "africa", "south-america", "asia", "europe"]


def test_egress_is_priced_at_the_same_continent_rate(config):
    located = priced(config)
    assert usd(located, "us-central1", "east") == (100.0, 2.0, 0.0)  # 100 GB x $0.02
    assert usd(located, "europe-west4", "east") == (100.0, 8.0, 0.0)  # 100 GB x $0.08
    assert usd(located, "us-central1", "us-multi") == (100.0, 1.0, 0.0)  # 100 GB x $0.01
    assert usd(located, "us-west1", "nam4-data") == (100.0, 2.0, 0.0)
    assert usd(located, "us-east1", "east") == (0.0, 0.0, 0.0)
    assert order_by_data(located, ["europe-west4", "us-central1"], [InputSpec(uri="gs://east/x")]) == [
        "us-central1", "europe-west4"]


def test_rates_written_before_the_same_continent_one_keep_working(config):
    """Three keys, as configurations had them: a read within the continent costs the multi-region's rate."""
    located = priced(config, {"same_region": 0.0, "same_multi_region": 0.01, "other": 0.08})
    assert located.data.egress_usd_per_gb.same_continent is None
    assert usd(located, "us-central1", "east") == (100.0, 1.0, 0.0)
    assert usd(located, "europe-west4", "east") == (100.0, 8.0, 0.0)
    free = priced(config, {"same_region": 0.0, "same_multi_region": 0.0, "other": 0.0})
    assert usd(free, "us-central1", "east") == (100.0, 0.0, 0.0)


def test_the_defaults_are_cloud_storages_list_prices(config):
    raw = json.loads(config.model_dump_json())
    raw["data"] = {"bucket_locations": {"east": "us-east1"}}
    located = ZenConfig.model_validate(raw)
    assert usd(located, "us-central1", "east") == (100.0, 1.0, 0.0)
    assert usd(located, "europe-west4", "east") == (100.0, 8.0, 0.0)
