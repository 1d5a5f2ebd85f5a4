"""A gang past its start bound stayed held by its flex-start resize request still queued.

docs/explanations/scaling.md: "A job past its start bound that may take another pool is not covered by its
requests still queued (so a costlier pool it accepts is asked)" (``flexrun.Queued``, ``ZenPlanner._cover``'s
``late``). One-node jobs got that; a gang did not: ``_cover`` handed gang groups to ``zen.scaling.gangs.match``,
which counted every pending VM of the pool, a queued request's included, whatever the group's bound. So a gang that
accepts standard and flex-start, its bound 1,000 s, waited for its flex-start grant until the request counts as
stuck (2 x ``flex_start_estimate_s`` = 1,800 s after the ask): 800 s past its bound while standard had capacity.

Through ZenPlanner.plan, as tests/scaling/test_flex_requests.py's one-node test of the same rule."""

from __future__ import annotations

from dataclasses import replace

from tests.scaling.test_planner import at, snap
from zen.scaling.model import ClusterLimits, DemandGroup, Pool, RegionMemory, Timing, Vm, VmPhase
from zen.scaling.planner import ZenPlanner

STD, FLEX = "us-central1", "us-central1/flex-start"
POOLS = {STD: Pool("us-central1", "standard", 5.92), FLEX: Pool("us-central1", "flex-start", 3.26)}


def plan(now, demand, vms=()):
    memory = {STD: RegionMemory(last_boot_at=at(-60)), FLEX: RegionMemory()}
    snapshot = snap(now, vms=vms, memory=memory, timing=Timing(),
                    limits=ClusterLimits("c", tuple(POOLS), 8, 8, pools=POOLS))
    return ZenPlanner().plan(replace(snapshot, demand=demand))


def test_past_its_bound_a_gang_its_queued_request_would_cover_is_asked_vms_of_another_pool_it_accepts():
    one = (DemandGroup(tuple(POOLS), 1, at(0), max_wait_s=1000),)
    gang = (DemandGroup(tuple(POOLS), 2, at(0), max_wait_s=1000, gang=2),)
    assert plan(0, one).add == {FLEX: 1} and plan(0, gang).add == {FLEX: 2}  # the cheaper pool, its 900 s estimate fits
    request = tuple(Vm(f"zen-c-us-central1-flex+r1+{i}", FLEX, VmPhase.BOOTING, at(0)) for i in range(2))
    assert plan(900, gang, request).add == {}  # within its bound it waits for its request
    assert plan(1100, one, request[:1]).add.get(STD, 0) >= 1  # a one-node job past its bound: standard asked
    waited = [now for now in (1100, 1300, 1500, 1700, 1790) if plan(now, gang, request).add.get(STD, 0) < 2]
    assert not waited, (f"a gang past its 1000 s start bound was still held by its queued flex-start request at "
                        f"{waited} s (standard had room; a one-node job is asked standard VMs at 1100 s)")
