"""Several jobs per VM: jobs that fit one VM together are asked one VM between them across the demand's rows
(docs/explanations/scaling.md): a job naming the cluster's one model (provisioning: standard) and one that names
none come to the same pools, as do a 1-GPU and a 3-GPU job. Packed row by row, two VMs booted where one holds both
(one of them then idle, billed)."""

from __future__ import annotations

from tests.scaling.test_jobs_per_vm_scaling import config, two_gpus  # noqa: F401
from tests.scaling.test_scaling_integration import stack  # noqa: F401


def test_two_two_gpu_jobs_of_the_same_pools_boot_one_vm(stack):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    fn.submit(two_gpus("a"))
    fn.submit(two_gpus("b", provisioning="standard"))
    fn.tick()
    asked = len(instances("us-west1"))
    assert asked == 1, f"{asked} VMs booted for two 2-GPU jobs one 4-GPU VM of two slots holds"


def test_a_one_gpu_and_a_three_gpu_job_boot_one_vm(stack):
    """Rows split by GPUs too: 1 + 3 GPUs fill one 4-GPU VM of two slots."""
    from tests.messages import job_request
    from tests.scaling.test_jobs_per_vm_scaling import TWO_GPUS
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a", regions=["us-west1"], **{**TWO_GPUS, "gpu_count": 1}))
    fn.submit(job_request("b", regions=["us-west1"], **{**TWO_GPUS, "gpu_count": 3}))
    fn.tick()
    asked = len(instances("us-west1"))
    assert asked == 1, f"{asked} VMs booted for a 1-GPU and a 3-GPU job one 4-GPU VM of two slots holds"
