"""The cheap coverage check is region-aware: an idle VM in one region covers no job that does not
allow that region, so such a job gets its own pass (and its VM) at once, not at the next tick."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import CLUSTER, stack, vm_beat, vm_claiming  # noqa: F401 - the fixture
from zen.scaling.coverage import Coverage
from zen.scaling.model import (
    ClusterLimits, ClusterSnapshot, DemandGroup, Vm, VmPhase,
)

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
LIMITS = ClusterLimits("c", ("us-central1", "us-west1"), 4, 8)


def idle(name: str, region: str) -> Vm:
    return Vm(name, region, VmPhase.IDLE, NOW)


def test_an_idle_vm_covers_only_jobs_that_allow_its_region():
    snapshot = ClusterSnapshot(NOW, LIMITS, (), (idle("c-1", "us-central1"),), {"us-central1": 1})
    coverage = Coverage.after(snapshot, 0)
    later = NOW + timedelta(seconds=1)
    assert not coverage.covers(later, regions=("us-west1",))
    assert coverage.covers(later, regions=("us-west1", "us-central1"))
    assert not coverage.covers(later, regions=("us-central1",))  # taken by the job before


def test_queued_jobs_take_the_idle_vms_of_their_regions_first():
    vms = (idle("c-1", "us-central1"), idle("w-1", "us-west1"))
    demand = (DemandGroup(("us-central1", "us-west1"), 1, NOW), DemandGroup(("us-central1",), 1, NOW))
    coverage = Coverage.after(ClusterSnapshot(NOW, LIMITS, (), vms, {"us-central1": 1, "us-west1": 1}, demand=demand),
                              0)
    assert coverage.spares == {}  # the central-only job takes c-1, the other w-1


def test_a_submission_to_a_region_without_an_idle_vm_gets_its_pass(stack, clock):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    vm = vm_claiming(fn, stack)  # a runs on a us-west1 VM, then it sits idle
    fn.heartbeat(heartbeat("a", "SUCCEEDED", 2, vm=vm.name, region="us-west1", zone=vm.zone, exit_code=0))
    fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 100, sent_at=clock().isoformat()))
    manager = zen.scaler.manager(CLUSTER)
    manager._timing = replace(manager._timing, keep_factor=100)  # kept idle (up to idle_timeout_s)
    zen.on_scale_tick()  # its pass: one idle VM to spare, in us-west1
    assert zen.scaler._coverage[CLUSTER].spare == 1 and instances("europe-west4") == []
    fn.submit(job_request("b", regions=["europe-west4"]))
    assert len(instances("europe-west4")) == 1  # b's own pass asked for its VM
