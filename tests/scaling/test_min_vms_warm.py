"""``min_vms`` ("VMs kept even when idle") was counted with instances that have no VM: a stocked-out pool's probe
(an instance CREATING that waits for capacity, billed nothing, ``zen.scaling.probes``) counted, so ``shrink_idle``
deleted the cluster's one warm VM down to "min_vms" while only the probe was left, and ``_keep_min`` (which
counts the same instances) asked for none to replace it: no VM at all while a job waited on a stocked-out
region, and the next job anywhere cold-booted. Only VMs that got capacity keep ``min_vms``
(``probes.with_capacity``)."""

from __future__ import annotations

from tests.scaling.test_planner import REGIONS, at, jobs, snap, trusted, vm
from zen.scaling.model import ClusterLimits, ErrorKind, RegionMemory, VmPhase
from zen.scaling.planner import ZenPlanner


def test_the_min_vms_warm_vm_is_not_traded_for_a_probe_that_has_no_vm():
    limits = ClusterLimits("c", REGIONS, max_vms_per_region=4, max_vms=6, min_vms=1)
    memory = trusted(REGIONS)
    # us-west1 stocked out a minute ago: its probe waits for capacity (no VM), for the job that allows only it.
    memory["us-west1"] = RegionMemory(strikes=1, last_stockout_at=at(3000), blocked_until=at(3000 + 180))
    probe = vm("p", "us-west1", VmPhase.BOOTING, since=2990, error=ErrorKind.STOCKOUT)
    warm = vm("warm", "us-central1", VmPhase.IDLE, since=0)  # the cluster's one VM, kept for min_vms
    plan = ZenPlanner().plan(snap(3060, queued=jobs(1, regions=("us-west1",)), vms=[warm, probe], memory=memory,
                                  limits=limits))
    vms_left = 1 - sum(name == "warm" for _, name in plan.delete) + sum(plan.add.values())
    assert vms_left >= limits.min_vms, (plan.delete, plan.add, [d.reason for d in plan.decisions])


def test_a_probe_with_no_vm_does_not_stand_for_the_min_vms_warm_vm():
    """With the warm VM gone by another path (a spot VM preempted, a fresh cluster whose first VM stocked out), the
    probe alone kept min_vms for ``_keep_min``: no warm VM was asked while a job waited on the blocked pool."""
    limits = ClusterLimits("c", REGIONS, max_vms_per_region=4, max_vms=6, min_vms=1)
    memory = trusted(REGIONS)
    memory["us-west1"] = RegionMemory(strikes=1, last_stockout_at=at(3000), blocked_until=at(3000 + 180))
    probe = vm("p", "us-west1", VmPhase.BOOTING, since=2990, error=ErrorKind.STOCKOUT)  # no VM: no capacity
    plan = ZenPlanner().plan(snap(3060, queued=jobs(1, regions=("us-west1",)), vms=[probe], memory=memory,
                                  limits=limits))
    with_vm = sum(plan.add.values())  # the probe got no capacity: only VMs asked now can be warm
    assert with_vm >= limits.min_vms, (plan.add, [d.reason for d in plan.decisions])
