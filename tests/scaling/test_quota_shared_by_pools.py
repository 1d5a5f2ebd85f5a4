"""A GPU quota shared by pools: GPUS_ALL_REGIONS by every region's pools, a region's PREEMPTIBLE_<GPU>_GPUS by its
spot and flex-start pools. The tick's read found room for two of the cluster's VMs under GPUS_ALL_REGIONS, and
each region was given the whole of it: five queued jobs were asked for in three regions at once, and Compute
refused what went past the quota (QUOTA_EXCEEDED), which struck the pools it refused in as after a stockout."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.scaling.test_gpu_quotas import quota_standin
from tests.scaling.test_quota_room_for_part import _asked, _zen
from zen.adapters.compute import compute_clients_from_env

CLUSTER = "4xa100-40gb"  # 4 GPUs a VM, max_vms_per_region 4; regions: us-central1, us-west1, europe-west4


@pytest.fixture
def two_vms_in_all(config, monkeypatch, tmp_path):
    """Room for two of the cluster's VMs in all regions together (8 GPUs), and plenty in each region."""
    with quota_standin(config, monkeypatch, tmp_path, {"regions": {}, "all_regions": 8}, capacity=8) as running:
        yield running


def test_a_quota_all_regions_share_is_asked_for_once_not_once_per_region(two_vms_in_all, config, db, publisher,
                                                                       clock):
    from zen_dev.local.invoke import FunctionsInvoker

    clients = compute_clients_from_env()
    fn = FunctionsInvoker(_zen(config, db, publisher, clock, clients))
    fn.tick()  # reads the quotas
    for n in range(5):  # each submission's pass asks by the read the tick remembered
        fn.submit(job_request(f"job-{n}", cluster=CLUSTER))
    asked = _asked(config, clients)
    assert sum(asked.values()) == 2, asked  # what the quota holds, wherever it is asked
    with db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
    assert not [d for d in decisions if d["action"] == "BLOCK"], decisions  # nothing refused, nothing struck
    held = [d["reason"] for d in decisions if d["action"] == "HOLD"]
    assert held and all("the last GPU quota read leaves no room for more in" in r for r in held), held


def test_the_room_of_a_shared_quota_is_counted_down_by_every_pool_under_it():
    """The planner's arithmetic: pools a and b share quota Q (room 2 at the read), b also quota R (room 1). What
    a pool may still ask is its own room less what every pool under each of its quotas grew by since the read."""
    from zen.scaling.model import RegionMemory
    from zen.scaling.quotas import UNLIMITED, left

    memory = {"a": RegionMemory(quota_room=2, quota_listed=1, quota_shared=(("Q", 2),)),
              "b": RegionMemory(quota_room=1, quota_listed=0, quota_shared=(("Q", 2), ("R", 1))),
              "c": RegionMemory()}
    held = {"a": 1, "b": 0, "c": 5}
    assert [left(memory, p, held.__getitem__) for p in "abc"] == [2, 1, UNLIMITED]
    held["b"] = 1  # b asked for one: Q has one left for a, R none for b
    assert [left(memory, p, held.__getitem__) for p in "ab"] == [1, 0]
    held["a"], held["b"] = 0, 0  # a's VM gone since the read: room for one more under Q
    assert [left(memory, p, held.__getitem__) for p in "ab"] == [3, 1]


def test_a_job_every_pool_of_which_a_full_quota_holds_back_is_told_the_quota_not_a_stockout(two_vms_in_all, config,
                                                                                          db, publisher, clock):
    """The two VMs asked fill GPUS_ALL_REGIONS; the next tick's read strikes every pool (no room for one more).
    The jobs left said "every allowed region is stocked out ...; probes are waiting for capacity"."""
    from zen_dev.local.invoke import FunctionsInvoker

    fn = FunctionsInvoker(_zen(config, db, publisher, clock, compute_clients_from_env()))
    fn.tick()
    for n in range(3):
        fn.submit(job_request(f"job-{n}", cluster=CLUSTER))
    fn.tick()
    with db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
    assert sorted(d["region"] for d in decisions if d["action"] == "BLOCK") == [
        "europe-west4", "us-central1", "us-west1"]  # the read: 8 of 8 GPUs in use
    held = [d["reason"].split(" wait: ", 1)[1] for d in decisions if d["action"] == "HOLD"]
    assert held and set(held) == {"the last GPU quota read leaves no room for more in us-central1, us-west1, "
                                  "europe-west4"}, held  # before the read's strikes (at their limit), and after



def test_a_block_the_quota_read_laid_is_lifted_by_a_read_that_finds_room_and_a_refusal_by_compute_is_not():
    """A pool the tick's read struck (its quota full of the cluster's own VMs) stayed blocked for up to max_block_s
    after those VMs went, while jobs waited and the quota had room."""
    from dataclasses import replace as replaced

    from tests.scaling.test_planner import LIMITS, at, jobs, snap
    from zen.scaling.model import ErrorKind, MigError
    from zen.scaling.planner import ZenPlanner

    first = LIMITS.regions[0]
    read = MigError(first, ErrorKind.QUOTA, at(0), detail=f"GPU quota GPUS_ALL_REGIONS (all regions) holds {first} back")
    struck = ZenPlanner().plan(replaced(snap(0, queued=jobs(1, regions=(first,)), errors=[read]),
                                        quota_room={first: 0}))
    assert [d.action.value for d in struck.decisions if d.region == first] == ["BLOCK"]
    assert not struck.add

    waiting = snap(60, queued=jobs(1, regions=(first,)), memory=struck.memory)
    assert not ZenPlanner().plan(waiting).add  # no read this pass: the block holds
    lifted = ZenPlanner().plan(replaced(waiting, quota_room={}))  # the tick's read: room for a region's worth
    assert lifted.add == {first: 1}, lifted.add
    assert [d.action.value for d in lifted.decisions if d.region == first][0] == "UNBLOCK"

    refused = MigError(first, ErrorKind.QUOTA, at(0))  # Compute's QUOTA_EXCEEDED: a quota Zen may not read
    by_compute = ZenPlanner().plan(snap(0, queued=jobs(1, regions=(first,)), errors=[refused]))
    again = ZenPlanner().plan(replaced(snap(60, queued=jobs(1, regions=(first,)), memory=by_compute.memory),
                                       quota_room={}))
    assert not again.add and "UNBLOCK" not in [d.action.value for d in again.decisions]
