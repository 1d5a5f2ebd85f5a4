"""The planner's pools priced in production (``zen.scaling.pricing``): from the table Zen uses, read at
most every ten minutes, kept through a failed read, and what a pass's decisions then say."""

from __future__ import annotations

from datetime import datetime, timezone

from zen.core.config import ClusterConfig
from zen.core.prices import Price, PriceTable
from zen.scaling.pricing import PoolPrices

CLUSTER = ClusterConfig(name="8xa100", gpu_type="nvidia-tesla-a100", gpu_count=8, machine_type="a2-highgpu-8g",
                        regions=["us-central1", "us-west1"], max_vms_per_region=2, max_vms=4,
                        provisioning=["spot", "standard"])


def table(spot: float) -> PriceTable:
    at = datetime(2026, 11, 29, tzinfo=timezone.utc)
    return PriceTable({("a2-highgpu-8g", "us-central1", "spot"): Price(spot, "catalog", at),
                       ("a2-highgpu-8g", "us-central1", "standard"): Price(29.39, "catalog", at),
                       ("a2-highgpu-8g", "us-west1", "spot"): Price(spot * 0.9, "catalog", at)})


def test_pools_are_priced_from_the_table_read_at_most_once_per_ttl_and_kept_through_a_failed_read():
    reads: list[float] = []

    def read() -> PriceTable:
        reads.append(1)
        if len(reads) == 2:
            raise RuntimeError("database away")
        return table(2.37 * len(reads))

    prices = PoolPrices(read, ttl_s=0)  # every call reads
    pools = prices.pools(CLUSTER)
    assert {k: p.usd_per_hour for k, p in pools.items()} == {
        "us-central1": 2.37, "us-central1/standard": 29.39, "us-west1": 2.37 * 0.9, "us-west1/standard": None}
    assert prices.pools(CLUSTER) is pools  # the read failed: the last prices stay (the very same pools)
    assert prices.pools(CLUSTER)["us-central1"].usd_per_hour == 2.37 * 3
    kept = PoolPrices(read, ttl_s=600)
    kept.pools(CLUSTER), kept.pools(CLUSTER)
    assert len(reads) == 4  # one read for both
    assert all(p.usd_per_hour is None for p in PoolPrices(None).pools(CLUSTER).values())


def test_zen_from_env_prices_each_managers_pools_from_the_snapshot(db_url, monkeypatch):
    from zen.app import Zen

    for name, value in {"ZEN_DATABASE_URL": db_url, "ZEN_COMPUTE_ENDPOINT": "127.0.0.1:9", "ZEN_PRICES": "snapshot",
                        "PUBSUB_EMULATOR_HOST": "127.0.0.1:9", "ZEN_PROJECT": "p", "ZEN_SCALING": "on"}.items():
        monkeypatch.setenv(name, value)
    zen = Zen.from_env()
    cluster = zen.config.clusters[0]
    pools = zen.scaler.manager(cluster.name).pools
    assert list(pools) == list(cluster.pools())
    assert any(pool.usd_per_hour for pool in pools.values())  # the committed snapshot prices its shape
    assert zen.scaler.manager(cluster.name)._timing.max_start_wait_s == cluster.max_start_wait_s  # its jobs' bound
