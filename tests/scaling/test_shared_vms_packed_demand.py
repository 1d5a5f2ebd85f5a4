"""Several jobs per VM (``max_jobs_per_vm`` > 1): queued jobs that fit together on one VM are asked one VM between
them, not one each (``zen.scaling.sharing.absorb``). Counted one VM each, four 2-GPU tasks on a cluster of 4-GPU VMs
that run 2 jobs each booted four VMs where two hold them all: the first two up took all four tasks and the other two
came up idle, billed for their boot and idle time."""

from __future__ import annotations

from tests.scaling.test_jobs_per_vm_scaling import config, two_gpus  # noqa: F401
from tests.scaling.test_scaling_integration import stack  # noqa: F401


def test_four_two_gpu_tasks_on_four_gpu_two_slot_vms_boot_two_vms_not_four(stack):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    fn.submit(two_gpus("sweep", array={"count": 4}))
    fn.tick()
    asked = len(instances("us-west1"))
    assert asked == 2, f"{asked} VMs booted for four 2-GPU jobs that two 4-GPU VMs of two slots hold"
