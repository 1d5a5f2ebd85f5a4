"""A cluster's ``gpu_count`` lowered (its machine type changed) while a job that asked for more GPUs waits: the job
asked for 6 A100s by shape, the 8-GPU cluster took it, and its VMs now have 4. Its start message carried no ``gpus``
(a job holding at least a VM's GPUs takes the whole VM), no claim check looked at GPUs, and the job ran on a 4-GPU VM,
with fewer GPUs than it asked (a wrong world size, or out of memory). Now no VM that has fewer GPUs than the job
asks takes it: it is held PENDING, its hold and ``zen explain`` naming ``gpu_count``, and looked at again every
5 minutes until the configuration has such VMs again, or its user stops it (docs/how-to/operate.md)."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from zen.app import Zen
from zen.store import repository
from zen_dev.local.invoke import FunctionsInvoker

C = "8xa100-40gb"
VM = f"zen-{C}-us-central1-abcd"  # booted from the new template: 4 GPUs


def _lowered(config, gpus=4, machine="a2-highgpu-4g"):
    return config.model_copy(update={"clusters": [
        c.model_copy(update={"gpu_count": gpus, "machine_type": machine}) if c.name == C else c
        for c in config.clusters]})


def _job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def _explained(zen, job_id):
    from zen.cli.queues import explain_line

    with zen.db.transaction() as session:
        return explain_line(session, zen.config, repository.get_job(session, job_id))


def test_a_job_asking_more_gpus_than_the_clusters_vms_have_now_does_not_run_on_one(config, db, publisher, clock):
    FunctionsInvoker(Zen(config, db, publisher, clock)).submit(
        job_request("six", cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=6))
    assert _job(Zen(config, db, publisher, clock), "six").cluster == C
    zen = Zen(_lowered(config), db, publisher, clock)  # the operator: a2-highgpu-4g, gpu_count 4
    functions = FunctionsInvoker(zen)
    assert "gpu_count" in _explained(zen, "six")  # before any VM claims it: no VM can take it, and why
    functions.heartbeat(heartbeat("six", "CLAIMED", 1, vm=VM))
    job = _job(zen, "six")
    assert (job.status.value, job.vm) == ("PENDING", None), f"6-GPU job {job.status.value} on 4-GPU VM {job.vm}"
    assert "gpu_count 4" in job.hold and "asks 6" in job.hold, job.hold
    assert "gpu_count 4" in _explained(zen, "six")
    clock.advance(301)
    functions.tick()  # looked at again: still no VM with 6 GPUs
    assert _job(zen, "six").status.value == "PENDING"

    # The operator goes back to 8-GPU VMs: the job is let go at its next look.
    zen = Zen(config, db, publisher, clock)
    clock.advance(301)
    FunctionsInvoker(zen).tick()
    assert _job(zen, "six").status.value == "QUEUED"


def test_a_job_that_fits_the_lowered_vms_still_runs(config, db, publisher, clock):
    """Asked 6, held all 8 of a one-job VM; the VMs now have 6: it runs as asked."""
    FunctionsInvoker(Zen(config, db, publisher, clock)).submit(
        job_request("six", cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=6))
    zen = Zen(_lowered(config, 6, "a2-highgpu-8g"), db, publisher, clock)  # (not validated: the rule alone)
    FunctionsInvoker(zen).heartbeat(heartbeat("six", "CLAIMED", 1, vm=VM))
    assert _job(zen, "six").status.value == "ASSIGNED"
