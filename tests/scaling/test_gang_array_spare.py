"""A submission skips its scaling pass when the last pass left a spare idle VM that covers it, unless it brings
more than one VM of demand (``Outcome.nodes > 1``: a gang's nodes, an array's tasks let go). An array's outcome
counted its tasks let go, not their VMs: an array of multi-node tasks (nodes: 2) letting one task go counted 1,
so one spare idle VM "covered" a gang of two and its second VM was asked for only at the next tick. The same
gang submitted as a plain job got its pass at once. It counts their VMs now."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import BOOT_S, stack, vm_beat  # noqa: F401 - the fixture


@pytest.mark.parametrize("array", [None, {"count": 1}, {"count": 3, "max_parallel": 1}],
                         ids=["plain-gang", "array-of-one-gang", "gang-array-one-at-a-time"])
def test_a_gang_task_of_an_array_is_not_covered_by_one_spare_vm(stack, clock, array):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a", regions=["us-west1"]))
    advance(BOOT_S + 1)
    [vm] = instances("us-west1")
    fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 1, sent_at=clock().isoformat()))
    fn.heartbeat(heartbeat("a", "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone))
    fn.heartbeat(heartbeat("a", "SUCCEEDED", 2, vm=vm.name, region="us-west1", zone=vm.zone, exit_code=0))
    fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 2, sent_at=clock().isoformat()))
    advance(11)  # the last pass's view is no longer trusted
    fn.submit(job_request("x", regions=["europe-west4"]))  # a pass: the idle us-west1 VM is a spare
    assert [i.name for i in instances("us-west1")] == [vm.name]

    fn.submit(job_request("g", regions=["us-west1"], nodes=2, **({"array": array} if array else {})))
    # The gang needs two VMs; the spare is one of them: the second is wanted now, not at the next tick.
    assert len(instances("us-west1")) == 2, "the gang task's pass was skipped: its second node waits for the tick"
