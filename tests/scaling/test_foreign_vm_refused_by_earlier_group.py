"""[flex-start, standard] -> [standard, flex-start]: the primary MIG's pool (the bare region) is standard now, and its
VMs booted as flex-start stay so (``Vm.model``), refusing the claim of a job that accepts standard VMs only. A group
of any model queued before such a job counts no such VM as its own when its run ends before the group's longest job
would (``zen.scaling.flexrun.ends_before``): it takes the pool's standard VM, and the flex-start VM is no VM of the
standard-only job's either (``zen.scaling.flexrun.hidden``). Planned by ZenPlanner on snapshots (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from zen.scaling.model import ClusterLimits, ClusterSnapshot, DemandGroup, Pool, RegionMemory, Timing, Vm, VmPhase
from zen.scaling.planner import ZenPlanner

NOW = datetime(2026, 1, 5, 12, tzinfo=timezone.utc)
DAY = 86400.0
POOL, FLEX = "us-central1", "us-central1|flex-start"  # the primary MIG's pool (standard now), the flex-start one's
LIMITS = ClusterLimits("c", (POOL, FLEX), 8, 8, flex_run_s=7 * DAY,
                       pools={POOL: Pool(POOL, "standard", 3.67), FLEX: Pool(FLEX, "flex-start", 1.8)})


def _idle(name: str, model: str, heard_s: float) -> Vm:
    return Vm(name, POOL, VmPhase.IDLE, NOW - timedelta(seconds=20), zone="us-central1-a", model=model,
              heard_at=NOW, first_heard_at=NOW - timedelta(seconds=heard_s))


def test_a_standard_only_job_gets_a_vm_when_an_earlier_job_of_any_model_refuses_the_flex_vm_too():
    """Six days into its seven-day run, the flex-start VM takes no job of two days: the job of any model, queued first,
    is counted the standard VM. The standard-only job after it was counted the flex-start VM, as though the earlier
    job had taken that one: no VM was asked for it, and its claims on the flex-start VM were refused, the job waiting."""
    vms = (_idle("vm-flex", "flex-start", 6 * DAY), _idle("vm-standard", "standard", DAY))
    any_model = DemandGroup((POOL, FLEX), 1, NOW - timedelta(seconds=50), longest_s=2 * DAY)
    standard_only = DemandGroup((POOL,), 1, NOW - timedelta(seconds=5), longest_s=2 * DAY, accepts="standard")
    snapshot = ClusterSnapshot(now=NOW, cluster=LIMITS, queued=(), vms=vms, target_sizes={POOL: 2},
                               memory={POOL: RegionMemory(last_boot_at=NOW - timedelta(hours=1)),
                                       FLEX: RegionMemory(last_boot_at=NOW - timedelta(hours=1))},
                               timing=Timing(spare_boots=False), demand=(any_model, standard_only))
    plan = ZenPlanner().plan(snapshot)
    assert plan.add == {POOL: 1}, [d.reason for d in plan.decisions]
