"""``TickQuotas.settle`` holds the memory of a cluster planned first to the room the clusters after it left
(``TickQuotas.held``). A pool of it whose room those did not lower still counts the quotas it shares with the lowered
ones (``zen.scaling.quotas.left``): kept as its own pass left it, its VMs asked for in the tick counted as that pool's
growth against a room that already held them, and the lowered pool was given less room than the quota has."""

from __future__ import annotations

from zen.core.quotas import ALL_REGIONS, Quota, gpu_metric
from zen.scaling import quotas
from zen.scaling.model import RegionMemory
from zen.scaling.pricing import cluster_pools

CENTRAL, WEST, EUROPE = "us-central1", "us-west1", "europe-west4"


class Read:
    """Compute's quotas as one tick reads them: ``free`` GPUs in each region (its metric), ``all_free`` in all."""

    def __init__(self, metric: str, free: dict[str, int], all_free: int):
        self.metric, self.free, self.all_free = metric, free, all_free

    def region(self, region: str, fresh: bool = False) -> dict[str, Quota]:
        return {self.metric: Quota(self.metric, self.free[region], 0)}

    def project_wide(self, fresh: bool = False) -> dict[str, Quota]:
        return {ALL_REGIONS: Quota(ALL_REGIONS, self.all_free, 0)}


def test_the_vms_a_pool_added_in_the_tick_count_once_against_a_quota_it_shares_with_a_lowered_pool(config):
    four = config.cluster("4xa100-40gb")
    pools = {key: pool for key, pool in cluster_pools(four).items() if pool.model == four.provisioning[0]}
    assert [pool.region for pool in pools.values()] == [CENTRAL, WEST, EUROPE], pools
    key = {pool.region: k for k, pool in pools.items()}
    per_vm, metric = four.gpu_count, gpu_metric(four.gpu_type, four.provisioning[0])
    # GPUS_ALL_REGIONS has room for 5 of its VMs, us-west1's regional quota for 1.
    tick = quotas.TickQuotas(Read(metric, {CENTRAL: 1000, WEST: per_vm, EUROPE: 1000}, 5 * per_vm),
                             [CENTRAL, WEST, EUROPE], map)
    _, rooms = tick.check(four, pools)
    assert dict(rooms) == {key[CENTRAL]: 5, key[WEST]: 1, key[EUROPE]: 5}, dict(rooms)
    memory = quotas.remember({k: RegionMemory() for k in pools}, rooms, {})  # as its pass of the tick kept it
    added = {key[CENTRAL]: 2, key[WEST]: 1}
    tick.took(four, pools, added)
    tick.took(four, {"other": pools[key[EUROPE]]}, {"other": 1})  # a cluster planned after it: one VM in Europe
    settled = {**memory, **tick.held(four, pools, memory, added)}
    holds = {key[CENTRAL]: 2, key[WEST]: 1, key[EUROPE]: 0}  # its VMs, listed or asked for
    # GPUS_ALL_REGIONS: 5 - 3 (its own) - 1 (the other's) = room for 1 more; us-west1's quota is full.
    assert [quotas.left(settled, k, holds.__getitem__) for k in pools] == [1, 0, 1]

