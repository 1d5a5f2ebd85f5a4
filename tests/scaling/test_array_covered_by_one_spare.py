"""A submission runs a scaling pass unless the cluster's last pass (within 10 s) left a spare idle VM for it
(``Zen.on_job_submitted``, ``ClusterOrchestrator.covered``, ``Coverage.covers``). An array is one submission of
N tasks, all QUEUED at once, but the check takes one spare VM for the whole array: with one spare idle VM,
an array of three skips its pass and two of its tasks get no VM until the next tick (docs: a pass runs
"right after a submission that no idle VM of its allowed regions covers while its cluster has room")."""

from __future__ import annotations

from tests.messages import job_request
from tests.scaling.test_scaling_integration import idle_after_a_job, stack  # noqa: F401 - the fixture


def test_an_array_of_three_is_not_covered_by_one_spare_vm(stack, clock):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    vm = idle_after_a_job(fn, stack, clock)
    advance(11)  # the last pass's view is no longer trusted
    fn.submit(job_request("x", regions=["europe-west4"]))  # a pass: the idle us-west1 VM is a spare
    assert [i.name for i in instances("us-west1")] == [vm.name]

    fn.submit(job_request("sweep", regions=["us-west1"], array={"count": 3}))  # three jobs at once
    # The spare VM takes one of the three: two VMs more are wanted now, not at the next tick.
    assert len(instances("us-west1")) == 3, "the array's pass was skipped: two of its tasks wait for the tick"
