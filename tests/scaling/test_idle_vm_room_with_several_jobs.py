"""Where VMs run several jobs at once (``max_jobs_per_vm`` > 1), an idle VM takes as many queued jobs as its slots
and GPUs hold; the planner counted it as supply for one job only (``zen.scaling.sharing.absorb`` counted busy VMs'
room alone), so a burst the idle VM took whole (an array) booted a VM per job beyond the first, which then went
idle, billed for nothing."""

from __future__ import annotations

import json

import pytest

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, _jobs, stack, vm_beat  # noqa: F401 - the fixture
from zen.core.config import ZenConfig


@pytest.fixture
def config(project):
    """The test stack's cluster (4 GPUs per VM) running two jobs at once."""
    from zen.core.config import load_config

    raw = json.loads(load_config().model_copy(update={"project": project}).model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster["max_jobs_per_vm"] = 2
    return ZenConfig.model_validate(raw)


def two_gpus(job_id: str, **extra) -> dict:
    return job_request(job_id, cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=2, regions=["us-west1"], **extra)


def test_an_idle_vm_with_room_for_two_jobs_boots_no_vm_for_the_second(stack, clock):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    fn.submit(two_gpus("a"))
    advance(BOOT_S + 1)
    [vm] = instances("us-west1")
    fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 1, sent_at=clock().isoformat()))
    fn.heartbeat(heartbeat("a", "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone))
    fn.heartbeat(heartbeat("a", "SUCCEEDED", 2, vm=vm.name, region="us-west1", zone=vm.zone, exit_code=0))
    fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 2, sent_at=clock().isoformat()))
    advance(15)  # the last pass's view is no longer trusted: the next submission runs a pass

    # Two 2-GPU jobs at once (an array of two): the idle 4-GPU VM, two slots, takes both.
    fn.submit(two_gpus("sweep", array={"count": 2}))
    for n, task in enumerate(("sweep-0", "sweep-1"), start=1):
        fn.heartbeat(heartbeat(task, "CLAIMED", n, vm=vm.name, region="us-west1", zone=vm.zone))
    assert {j.job_id: j.status.value for j in _jobs(zen) if j.job_id.startswith("sweep")} == {
        "sweep-0": "ASSIGNED", "sweep-1": "ASSIGNED"}  # both run on the idle VM
    # ... yet the pass booted a VM for the second one, which now boots for nobody.
    assert [i.name for i in instances("us-west1")] == [vm.name], "a VM was booted for a job the idle VM took"
