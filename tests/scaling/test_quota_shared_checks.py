"""GPU quotas shared by pools, in the cases around the common one: memory that came back from the database, a
pool's VMs gone since the read, blocks the quota read did not lay alone, a held job's reason when its pools are
held back for different causes, and a shared quota with room for a region's worth but not for every region's."""

from __future__ import annotations

import json
from dataclasses import replace as replaced
from datetime import timedelta

import pytest

from tests.messages import job_request
from tests.scaling.test_gpu_quotas import quota_standin
from tests.scaling.test_planner import LIMITS, at, jobs, snap, vm
from tests.scaling.test_quota_room_for_part import _asked, _zen
from zen.adapters.compute import compute_clients_from_env
from zen.scaling import probes, quotas
from zen.scaling.fleetdb import memory_from_json, memory_to_json
from zen.scaling.model import ErrorKind, MigError, RegionMemory, Timing, VmPhase
from zen.scaling.planner import ZenPlanner
from zen.scaling.unread import planner_view

CENTRAL, WEST, EUROPE = LIMITS.regions
ALL = quotas.ALL_REGIONS
CLUSTER = "4xa100-40gb"  # 4 GPUs a VM, max_vms_per_region 4, max_vms 8; regions: us-central1, us-west1, europe-west4


def _read(room: int, listed: int, **more) -> RegionMemory:
    return RegionMemory(quota_room=room, quota_listed=listed, quota_shared=((ALL, room),), **more)


def test_memory_read_back_from_the_database_counts_as_it_was_written():
    memory = {CENTRAL: _read(2, 1), WEST: RegionMemory(quota_room=1, quota_listed=0,
                                                       quota_shared=((ALL, 2), ("PREEMPTIBLE_X in us-west1", 1))),
              EUROPE: RegionMemory()}
    stored = {pool: memory_from_json(json.loads(memory_to_json(m))) for pool, m in memory.items()}
    assert isinstance(stored[WEST].quota_shared[0], list)  # lists come back as tuples at the top level only
    for held in ({CENTRAL: 1, WEST: 0, EUROPE: 3}, {CENTRAL: 2, WEST: 1, EUROPE: 0}, {CENTRAL: 0, WEST: 0, EUROPE: 0}):
        assert [quotas.left(stored, p, held.__getitem__) for p in memory] == [
            quotas.left(memory, p, held.__getitem__) for p in memory]


def test_a_quota_freed_by_one_pools_vms_going_is_room_for_every_pool_under_it():
    """GPUS_ALL_REGIONS had room for one more VM at the read, with three of the cluster's VMs in us-central1; those
    went since. Every pool under it has room for four now, not only the pool whose VMs went."""
    memory = {CENTRAL: _read(1, 3), WEST: _read(1, 0), EUROPE: _read(1, 0)}
    held = {CENTRAL: 0, WEST: 0, EUROPE: 0}
    assert [quotas.left(memory, p, held.__getitem__) for p in memory] == [4, 4, 4]
    plan = ZenPlanner().plan(snap(0, queued=jobs(3, regions=(WEST,)), memory=memory))
    assert plan.add == {WEST: 3}, plan.decisions


def test_a_pool_whose_mig_was_not_read_is_not_unblocked_by_a_quota_read():
    read_blocked = RegionMemory(blocked_until=at(900), strikes=3, last_stockout_at=at(-1), quota_block="read")
    memory = {CENTRAL: read_blocked, WEST: RegionMemory(), EUROPE: RegionMemory()}
    limits = replaced(LIMITS, min_vms=1)
    snapshot = replaced(snap(0, queued=jobs(1, regions=(CENTRAL,)), memory=memory, limits=limits),
                        quota_room={}, unread=frozenset({CENTRAL}))
    view, _ = planner_view(snapshot)
    plan = ZenPlanner().plan(view)
    assert CENTRAL not in plan.add, plan.decisions
    assert not [d for d in plan.decisions if d.region == CENTRAL and d.action.value == "UNBLOCK"], plan.decisions


def test_a_block_silent_boots_lay_is_not_lifted_by_a_quota_read_whatever_block_it_found():
    """us-west1's read block ended later than the block two pools' silent boots lay on every pool: the later one was
    kept, still taken for the read's, and a read with room lifted it: the cluster's next VM went to us-west1 at once,
    not one VM when the silent block ended."""
    now, timing = at(0), Timing()
    memory = {CENTRAL: RegionMemory(silent=1), EUROPE: RegionMemory(silent=1),
              WEST: RegionMemory(blocked_until=now + timedelta(seconds=timing.max_block_s), strikes=4,
                                 last_stockout_at=now, quota_block="read")}
    silent = vm("silent-1", CENTRAL, VmPhase.BOOTING)
    probes.silent_boot(memory, CENTRAL, silent, 600, now, timing)
    assert not memory[WEST].quota_block
    assert not quotas.lift(memory, {}, now + timedelta(seconds=60))
    assert memory[WEST].blocked_until is not None and memory[WEST].blocked_until > now + timedelta(seconds=60)


def test_a_pool_compute_refused_for_quota_in_the_pass_its_read_struck_it_is_not_unblocked_by_the_next_read():
    refused = MigError(CENTRAL, ErrorKind.QUOTA, at(-5))  # Compute's QUOTA_EXCEEDED: a quota Zen may not read
    read = MigError(CENTRAL, ErrorKind.QUOTA, at(0), detail=f"GPU quota {ALL} (all regions) holds {CENTRAL} back")
    struck = ZenPlanner().plan(replaced(snap(0, queued=jobs(1, regions=(CENTRAL,)), errors=[refused, read]),
                                        quota_room={CENTRAL: 0}))
    assert [d.action.value for d in struck.decisions if d.region == CENTRAL] == ["BLOCK"]
    again = ZenPlanner().plan(replaced(snap(60, queued=jobs(1, regions=(CENTRAL,)), memory=struck.memory),
                                       quota_room={}))
    assert not again.add and "UNBLOCK" not in [d.action.value for d in again.decisions], again.decisions


def test_a_held_job_names_each_of_its_pools_for_what_holds_it_back():
    """us-central1 stocked out, us-west1 without quota room (not struck: no job wanted it at the read), europe-west4
    at max_vms_per_region. us-west1 was said to be at its limit too."""
    memory = {CENTRAL: RegionMemory(blocked_until=at(300), strikes=1, last_stockout_at=at(-10)),
              WEST: _read(0, 0), EUROPE: RegionMemory()}
    full = [vm(f"busy-{n}", EUROPE, VmPhase.BUSY, job=f"other-{n}") for n in range(LIMITS.max_vms_per_region)]
    plan = ZenPlanner().plan(snap(0, queued=jobs(1), vms=full, memory=memory))
    assert not plan.add
    [reason] = [d.reason for d in plan.decisions if d.action.value == "HOLD"]
    assert reason == ("1 job(s) wait: at their limit (max_vms_per_region): europe-west4; the last GPU quota read "
                      "leaves no room for more in us-west1; stocked out: us-central1"), reason
    alone = ZenPlanner().plan(snap(0, queued=jobs(1, regions=(WEST, EUROPE)), vms=full, memory=memory))
    [reason] = [d.reason for d in alone.decisions if d.action.value == "HOLD"]
    assert reason == ("1 job(s) wait: at their limit (max_vms_per_region): europe-west4; the last GPU quota read "
                      "leaves no room for more in us-west1"), reason


@pytest.fixture
def a_region_in_all(config, monkeypatch, tmp_path):
    """Room for four of the cluster's VMs in all regions together (16 GPUs): a region's worth, not two regions'."""
    with quota_standin(config, monkeypatch, tmp_path, {"regions": {}, "all_regions": 16}, capacity=8) as running:
        yield running


def test_a_quota_all_regions_share_with_room_for_a_regions_worth_is_not_asked_past(a_region_in_all, config, db,
                                                                                 publisher, clock):
    """Eight queued jobs: four were asked for in us-central1 and four in us-west1, and Compute refused the four that
    went past GPUS_ALL_REGIONS (QUOTA_EXCEEDED), which struck us-west1."""
    from zen_dev.local.invoke import FunctionsInvoker

    clients = compute_clients_from_env()
    fn = FunctionsInvoker(_zen(config, db, publisher, clock, clients))
    fn.tick()  # reads the quotas
    for n in range(8):
        fn.submit(job_request(f"job-{n}", cluster=CLUSTER))
    asked = _asked(config, clients)
    assert sum(asked.values()) == 4, asked
    with db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=80)
    assert not [d for d in decisions if d["action"] == "BLOCK"], decisions



def test_a_shared_quota_with_room_for_a_regions_worth_leaves_spare_boots_on():
    """GPUS_ALL_REGIONS with room for 6 VMs is tracked (five pools of 4 each could ask 20), and asks are held to it;
    with room for a region's worth, a boot racing in the same pool is no risk, as before it was tracked: spares
    were turned off for every pool under it (most projects' GPUS_ALL_REGIONS is below what a cluster could ask)."""
    from dataclasses import replace as replaced

    from tests.scaling.test_planner import trusted
    from tests.scaling.test_prices_in_planner import LIMITS, plan, queued

    shared = {r: replaced(m, quota_room=6, quota_listed=0, quota_shared=(("GPUS_ALL_REGIONS", 6),))
              for r, m in trusted(LIMITS.regions).items()}
    assert plan(jobs=queued(2), memory=shared).add == {"us-west1": 4}  # each job's first boot and its spare
    tight = {r: replaced(m, quota_room=3, quota_shared=(("GPUS_ALL_REGIONS", 3),)) for r, m in shared.items()}
    assert plan(jobs=queued(2), memory=tight).add == {"us-west1": 2}  # room for less than a region's worth


def test_a_vm_waiting_for_capacity_at_the_read_is_counted_against_the_quotas_room():
    """A VM asked for that has no capacity yet holds no GPU, so the quota's usage does not count it; it was counted
    among the VMs listed at the read all the same, so once it got capacity the room it took was given again."""
    from dataclasses import replace as replaced

    from tests.scaling.test_planner import LIMITS, at, snap, vm
    from zen.scaling.model import QueuedJob, VmPhase
    from zen.scaling.planner import ZenPlanner

    first = LIMITS.regions[0]
    waiting = [vm(f"w{i}", first, VmPhase.BOOTING, since=-30) for i in range(2)]  # not started: no capacity yet
    queued = [QueuedJob(f"j{i}", (first,), at(-60)) for i in range(4)]
    read = ZenPlanner().plan(replaced(snap(0, queued=queued, vms=waiting), quota_room={first: 2}))
    assert not read.add.get(first), read.add  # the quota's room for 2 is the 2 waiting VMs'


def test_a_job_whose_pool_compute_refused_for_quota_is_not_told_it_is_stocked_out():
    """Compute's QUOTA_EXCEEDED (a quota Zen may not read: CPUs, addresses) strikes the pool as a stockout does;
    the job waiting there was told "every allowed region is stocked out; probes are waiting for capacity"."""
    from tests.scaling.test_planner import LIMITS, at, jobs, snap
    from zen.scaling.model import ErrorKind, MigError
    from zen.scaling.planner import ZenPlanner

    first = LIMITS.regions[0]
    refused = MigError(first, ErrorKind.QUOTA, at(0))
    struck = ZenPlanner().plan(snap(0, queued=jobs(1, regions=(first,)), errors=[refused]))
    later = ZenPlanner().plan(snap(60, queued=jobs(1, regions=(first,)), memory=struck.memory))  # the error gone
    for plan in (struck, later):
        [held] = [d.reason for d in plan.decisions if d.action.value == "HOLD"]
        assert held == f"1 job(s) wait: Compute refused VMs for a quota (QUOTA_EXCEEDED) in {first}", held
    stockout = ZenPlanner().plan(snap(0, queued=jobs(1, regions=(first,)),
                                      errors=[MigError(first, ErrorKind.STOCKOUT, at(0))]))
    assert [d.reason for d in stockout.decisions if d.action.value == "HOLD"] == [
        f"1 job(s) wait: every allowed region is stocked out ({first}); probes are waiting for capacity"]
