"""The simulated side of Zen's start routing (``zen.core.routing``) and of the agents' warm caches
(``zen.agent.cache``), for ``zen_dev.sim.world``: which idle VM holds a job's dataset, whether a stockout
blocks its data's region, and what staging a job's input on a VM reads, hits and saves.
How it differs from production's offers: docs/reference/simulator.md#what-the-simulator-models
"""

from __future__ import annotations

from datetime import datetime

from zen_dev.sim.jobs import SimJob
from zen_dev.sim.metrics import RunResult
from zen_dev.sim.state import SimClusterState, SimJobState, SimVm


def warm_vm(cluster: SimClusterState, job: SimJobState) -> SimVm | None:
    """The most recently idle VM of an allowed pool whose warm cache holds the job's dataset: the VM
    production's offer goes to first (``zen.core.routing``; see the module's docstring)."""
    for pool in job.pools:
        for vm in reversed(cluster.idle[pool].values()):
            if job.spec.dataset in vm.cache:
                return vm
    return None


def blocked(cluster: SimClusterState, pools: tuple[str, ...], now: datetime) -> bool:
    """The planner's memory blocks every one of ``pools`` (a region's: a stockout), as
    ``fleet.blocked_regions`` reads it."""
    for pool in pools:
        memory = cluster.memory.get(pool)
        if memory is None or memory.blocked_until is None or memory.blocked_until <= now:
            return False
    return True


def stage(result: RunResult, vm: SimVm, spec: SimJob, cache_gb: float, staging_mb_s: float) -> None:
    """A data job's input on ``vm``: from its warm cache when it holds the dataset (nothing read, the
    staging time saved), else read (across regions unless in its data's region) and kept (LRU, at most
    ``cache_gb``; 0: no cache)."""
    cache = vm.cache
    result.input_gb += spec.input_gb
    if spec.dataset in cache:
        cache.move_to_end(spec.dataset)
        result.cache_hits += 1
        result.staging_s_saved += spec.input_gb * 1000 / staging_mb_s
        return
    if vm.mig.region != spec.data_region:
        result.input_gb_cross_region += spec.input_gb
    if cache_gb:
        result.cache_misses += 1
        if spec.input_gb <= cache_gb:
            cache[spec.dataset] = spec.input_gb
            while sum(cache.values()) > cache_gb:
                cache.popitem(last=False)
