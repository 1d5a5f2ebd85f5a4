"""A cluster's ``gpu_count`` lowered (its machine type changed) while a job that asked for more GPUs of a VM waits:
no VM of the cluster may run it (``zen.jobs.placement.gpus_short``), and the scale tick holds it before its scaling
pass counts the demand: PENDING, its hold and ``zen explain`` naming ``gpu_count`` and what it asks, no VM asked for
it. Counted as demand, it had a GPU VM booted for it, billed until that VM's first claim was refused (a gang: one for
each of its nodes). Once the cluster's VMs have the GPUs again, the tick
that looks at the held job again lets it go, QUEUED (docs/how-to/operate.md, Changing a cluster)."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.scaling.test_scaling_integration import build_stack
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.app import Zen
from zen.scaling.manager import ClusterOrchestrator
from zen.store import repository
from zen_dev.local.invoke import FunctionsInvoker

C = "8xa100-40gb"
REGIONS = ("us-central1", "us-west1", "europe-west4")  # the cluster's


def _lowered(config, gpus=4, machine="a2-highgpu-4g"):
    return config.model_copy(update={"clusters": [
        c.model_copy(update={"gpu_count": gpus, "machine_type": machine}) if c.name == C else c
        for c in config.clusters]})


@pytest.fixture
def stack(config, db, publisher, clock, monkeypatch, tmp_path):
    """(``scaled(config, scaling)``: Zen under ``config`` with its scaler (unless not ``scaling``) and its functions, ``advance(s)``: Zen's clock and the
    cloud's, ``vms()``: the cluster's VMs by region); no scaling pass runs before the first tick."""
    _, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path)
    clients = compute_clients_from_env()

    def scaled(configured, scaling=True):
        scaler = ClusterOrchestrator(configured, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients))
        zen = Zen(configured, db, publisher, clock, scaler=scaler if scaling else None)
        return zen, FunctionsInvoker(zen)

    yield scaled, advance, lambda: {r: len(instances(r, C)) for r in REGIONS}
    standin.stop()


def _job(zen, job_id):
    from zen.cli.queues import explain_line

    with zen.db.transaction() as session:
        job = repository.get_job(session, job_id)
        return job, explain_line(session, zen.config, job)


def test_a_job_asking_more_gpus_than_the_vms_have_now_gets_no_vm_and_runs_once_they_have_them(config, stack):
    scaled, advance, vms = stack
    zen, functions = scaled(config, scaling=False)  # submitted before the change, no scaling pass since
    functions.submit(job_request("six", cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=6))
    assert _job(zen, "six")[0].cluster == C
    zen, functions = scaled(_lowered(config))  # the operator: a2-highgpu-4g, gpu_count 4
    functions.tick()
    assert vms() == {r: 0 for r in REGIONS}, f"a GPU VM booted for a job no VM of {C} may run now: {vms()}"
    job, why = _job(zen, "six")
    assert job.status.value == "PENDING" and "gpu_count 4" in job.hold and "asks 6" in job.hold, job.hold
    assert why.startswith("held: ") and "gpu_count 4" in why, why
    advance(301)
    functions.tick()  # looked at again: still no VM with 6 GPUs
    assert _job(zen, "six")[0].status.value == "PENDING" and vms() == {r: 0 for r in REGIONS}, vms()

    zen, functions = scaled(config)  # back to 8-GPU VMs: the job is let go at its next look
    advance(301)
    functions.tick()
    job, _ = _job(zen, "six")
    assert (job.status.value, job.hold) == ("QUEUED", None)
