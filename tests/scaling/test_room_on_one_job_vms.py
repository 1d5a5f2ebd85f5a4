"""Raising a cluster's ``max_jobs_per_vm`` on a live fleet (docs/reference/configuration.md, "Upgrading: ...
then raise max_jobs_per_vm above 1"): the new value reaches the VMs through their instance template's
``zen-max-jobs-per-vm`` attribute, which a VM reads when it boots (MIGs update opportunistically), so a VM
booted before the change runs one job at a time, and says so: its VM heartbeats carry no ``jobs`` list
(``VmBeats.beat``: ``list_all`` only when its capacity is shared). Zen's scaling counted the room of such a
busy VM as supply for the queued jobs that fit it (``zen.scaling.sharing.absorb``, from the cluster's
configuration alone), so no VM was booted for them, while the VM never pulls one until its job ends: the
queued job waited for as long as that job ran (hours, for a training job). Only VMs whose agents list their
jobs (``shares``) offer room now.
"""

from __future__ import annotations

import json

import pytest

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, stack, vm_beat  # noqa: F401
from zen.core.config import ZenConfig


@pytest.fixture
def config(project):
    """The test stack's cluster (4 GPUs per VM), its max_jobs_per_vm raised to 2."""
    from zen.core.config import load_config

    raw = json.loads(load_config().model_copy(update={"project": project}).model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster["max_jobs_per_vm"] = 2
    return ZenConfig.model_validate(raw)


def two_gpus(job_id: str) -> dict:
    return job_request(job_id, regions=["us-west1"], cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=2)


def test_a_busy_vm_that_runs_one_job_at_a_time_is_no_room_for_a_queued_job(stack, clock):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    fn.submit(two_gpus("a"))
    advance(BOOT_S + 1)
    [vm] = instances("us-west1")
    # The VM's agent runs one job at a time (its template's zen-max-jobs-per-vm was 1 when it booted): its
    # VM heartbeats never name a `jobs` list, unlike an agent that may run several (which sends `jobs`).
    fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 1, sent_at=clock().isoformat()))
    fn.heartbeat(heartbeat("a", "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone))
    fn.heartbeat(heartbeat("a", "RUNNING", 2, vm=vm.name, region="us-west1", zone=vm.zone))
    fn.heartbeat({**vm_beat(vm.name, "us-west1", "BUSY", 3, sent_at=clock().isoformat()),
                  "job_id": "a", "attempt": 1})

    fn.submit(two_gpus("b"))  # the VM will not pull it while "a" runs
    fn.tick()
    advance(BOOT_S + 1)
    fn.tick()

    assert len(instances("us-west1")) == 2, (
        "no VM was booted for b: the busy VM's 2 free GPUs were counted as room, though it runs one job at a "
        "time and takes nothing until a ends")
