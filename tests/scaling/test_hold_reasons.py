"""A HOLD's reason (what `zen explain` quotes) for a job whose every allowed pool is blocked (``probes.held_reason``):

- a job waiting on a flex-start pool's resize request, queued past twice ``flex_start_estimate_s``, was told
  "every allowed region is stocked out ...; probes are waiting for capacity": the request was never refused,
  it is still queued (a request is not a stockout). It is told the request is still queued.
- a job whose only pool was stocked out was told the cluster's VMs "got capacity and were never usable"
  because another pool, which the job does not allow, had three silent boots in a row (the count was read
  cluster-wide). It is told its pool is stocked out.
- a job whose one pool was stocked out and whose other was at ``max_vms_per_region`` was told "allowed regions'
  MIGs are at their limit": the stocked-out one is not. Each is named for what it is."""

from __future__ import annotations

from dataclasses import replace

from tests.scaling.test_flex_requests import _cluster, _minute
from tests.scaling.test_planner import LIMITS, _at_the_limit, _plus, at, jobs, snap, trusted, vm
from zen.scaling.model import Action, ErrorKind, RegionMemory, VmPhase
from zen.scaling.planner import ZenPlanner


def test_a_job_waiting_on_a_queued_flex_start_request_is_not_told_the_pool_is_stocked_out():
    key, mig, fleet, manager, t = _cluster()
    demand = fleet._facts.demand
    holds = []
    for _ in range(33):  # the request (r0, 3 VMs) counts as stuck after 1800 s: its pool is blocked
        report = _minute(fleet, manager, t, demand)
        holds += [d.reason for d in report.decisions if d.action.value == "HOLD" and d.region is None]
    assert mig.made == ["r0"] and len(mig.instances) == 3  # the request still queued, never refused nor cancelled
    assert holds, "no job's HOLD recorded"
    assert not [h for h in holds if "stocked out" in h], holds



def test_a_job_on_a_stocked_out_pool_is_not_told_another_pools_vms_never_came_up():
    memory = trusted()
    # us-central1: three of its own VMs in a row got capacity and never came up (its network): blocked alone.
    memory["us-central1"] = RegionMemory(silent=3, strikes=3, blocked_until=at(10_000), last_stockout_at=at(-600))
    # us-west1: a stockout, its probe waiting for capacity.
    memory["us-west1"] = RegionMemory(strikes=1, blocked_until=at(500), last_stockout_at=at(-10))
    probe = vm("w0", "us-west1", VmPhase.BOOTING, since=-10, error=ErrorKind.STOCKOUT)
    plan = ZenPlanner().plan(snap(0, queued=jobs(1, regions=("us-west1",)), vms=[probe], memory=memory))
    [hold] = [d for d in plan.decisions if d.action is Action.HOLD]
    assert "never usable" not in hold.reason, hold.reason  # us-west1 never had a silent boot
    assert "stocked out (us-west1)" in hold.reason, hold.reason


def test_a_job_between_a_stocked_out_pool_and_a_full_one_is_told_which_is_which():
    snapshot = _plus(_at_the_limit(blocked=("us-central1",)), vm("x0", "us-west1", VmPhase.BUSY, job="t0"))
    plan = ZenPlanner().plan(replace(snapshot, queued=jobs(1, regions=("us-central1", "us-west1"), queued_at=990),
                                     cluster=replace(LIMITS, max_vms=20),
                                     target_sizes=dict(snapshot.target_sizes, **{"us-west1": 4})))
    [hold] = [d for d in plan.decisions if d.action is Action.HOLD]
    assert "at their limit (max_vms_per_region): us-west1" in hold.reason, hold.reason
    assert "stocked out: us-central1" in hold.reason and "allowed regions" not in hold.reason, hold.reason
