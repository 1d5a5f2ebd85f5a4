"""[spot, standard] -> [standard]: the primary MIG's pool (the bare region) is standard now, and its VMs booted as spot
stay spot (``Vm.model``), refusing the claim of a job that accepts standard VMs only (``zen.jobs.claims``). Beside
such a spot VM, an idle standard VM is that job's: the planner keeps it for the job whatever else it counts
(``zen.scaling.flexrun.hidden``, ``ZenPlanner.shrink_idle``), and a submission is not spared a pass by the spot VM
(``Coverage``). Planned by ZenPlanner on snapshots (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from zen.scaling.coverage import Coverage
from zen.scaling.model import ClusterLimits, ClusterSnapshot, DemandGroup, Pool, RegionMemory, Timing, Vm, VmPhase
from zen.scaling.planner import ZenPlanner

NOW = datetime(2026, 1, 5, 12, tzinfo=timezone.utc)
POOL = "us-central1"  # the primary model's pool: standard, as the cluster is configured now
LIMITS = ClusterLimits("c", (POOL,), 8, 8, pools={POOL: Pool(POOL, "standard", 3.67)})


def _idle(name: str, model: str, idle_s: float) -> Vm:
    return Vm(name, POOL, VmPhase.IDLE, NOW - timedelta(seconds=idle_s), zone="us-central1-a", model=model,
              heard_at=NOW, first_heard_at=NOW - timedelta(hours=1))


def _plan(vms: tuple[Vm, ...], *demand: DemandGroup):
    snapshot = ClusterSnapshot(now=NOW, cluster=LIMITS, queued=(), vms=vms, target_sizes={POOL: len(vms)},
                               memory={POOL: RegionMemory(last_boot_at=NOW - timedelta(hours=1))},
                               timing=Timing(spare_boots=False), demand=demand)
    return snapshot, ZenPlanner().plan(snapshot)


SPOT, STANDARD = _idle("vm-spot", "spot", 1000), _idle("vm-standard", "standard", 2000)  # the standard one idle longer
STANDARD_ONLY = DemandGroup((POOL,), 1, NOW - timedelta(seconds=5), accepts="standard")
ANY_OLDER = DemandGroup((POOL,), 1, NOW - timedelta(seconds=50))


def test_the_idle_standard_vm_is_kept_for_a_standard_only_job_and_the_spot_vm_goes():
    """One VM of the two was the job's, counted by region: the standard VM, idle longer, was deleted as the spare and
    the spot VM kept, which the job's claims refuse; the job waited for a new VM to boot, the spot VM billed idle."""
    _, plan = _plan((SPOT, STANDARD), STANDARD_ONLY)
    assert plan.delete == [(POOL, "vm-spot")], [d.reason for d in plan.decisions]


def test_the_standard_vm_is_kept_while_the_spot_vm_is_too_new_to_go():
    """The spot VM idle a moment (kept by ski rental), the region's one spare was the standard VM: deleted, as idle
    longer, though it was the standard-only job's only VM."""
    _, plan = _plan((_idle("vm-spot", "spot", 5), STANDARD), STANDARD_ONLY)
    assert plan.delete == [], [d.reason for d in plan.decisions]


def test_a_job_of_any_model_leaves_the_standard_vm_to_a_standard_only_job_queued_after_it():
    """The older job of any model counted the one VM its jobs take from the pool's two, the standard-only job then
    had the spot VM hidden and none left: a standard VM was asked for it (billed) while an idle one stood there."""
    _, plan = _plan((SPOT, STANDARD), ANY_OLDER, STANDARD_ONLY)
    assert plan.add == {}, [d.reason for d in plan.decisions]
    assert plan.delete == [], [d.reason for d in plan.decisions]


def test_of_two_spare_vms_the_one_recorded_as_a_model_its_pool_no_longer_has_goes_first():
    """A job of any model takes either VM; the spare deleted is the spot VM (refused by standard-only jobs), not
    the standard one, idle longer, that every job of the cluster can take."""
    _, plan = _plan((SPOT, STANDARD), ANY_OLDER)
    assert plan.delete == [(POOL, "vm-spot")], [d.reason for d in plan.decisions]


def test_a_spare_spot_vm_spares_no_pass_to_a_new_job_of_the_pool():
    """Counted as a spare of the pool, the spot VM covered a standard-only job submitted next: no pass was run for
    it, its claims on the VM refused, and it waited for the next tick to have a VM asked."""
    snapshot, plan = _plan((_idle("vm-spot", "spot", 5),))  # idle a moment: kept (ski rental)
    assert plan.delete == [], [d.reason for d in plan.decisions]
    coverage = Coverage.after(snapshot, sum(plan.add.values()), [name for _, name in plan.delete])
    assert not coverage.covers(NOW, regions=(POOL,)), coverage.spares
