"""A cluster's models reordered while a job waits: [spot, standard] -> [standard, spot]. The primary MIG keeps its
name (``zen-<cluster>-<region>``) and terraform swaps its template, but its running VMs stay as they booted: spot.
Zen keeps the model each instance had when a scaling pass first saw it (``mig_instances.model``) and bills by it
(docs/explanations/accounting.md), and the claim check reads it too (zen.jobs.claims._unaccepted_model): read
from the VM's name under the new configuration, a spot VM of that MIG was taken for standard, and a job that
accepts standard VMs only (never preempted) ran on it."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from zen.core.config import ZenConfig
from zen.store import fleet, repository

CLUSTER = "4xa100-40gb"
SPOT_VM = "zen-4xa100-40gb-us-central1-ab12"  # booted by the primary MIG while spot was the primary


def _zen(config, db, publisher, clock, models):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster["provisioning"] = models
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    return zen, FunctionsInvoker(zen)


def test_a_standard_only_job_is_not_claimed_by_a_spot_vm_after_the_models_were_reordered(
        config, db, publisher, clock, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    before, _ = _zen(config, db, publisher, clock, ["spot", "standard"])
    with before.db.transaction() as session:  # a scaling pass lists the spot pool's VM, as the tick does
        fleet.see_instances(session, CLUSTER, "us-central1", [SPOT_VM], clock(), model="spot")
        [row] = [r for r in session.run("list_mig_instances")]
        assert row["name"] == SPOT_VM
    zen, functions = _zen(config, db, publisher, clock, ["standard", "spot"])  # the models reordered
    functions.submit(job_request("never-preempt", cluster=CLUSTER, provisioning="standard"))
    functions.heartbeat(heartbeat("never-preempt", "CLAIMED", 1, vm=SPOT_VM))
    with zen.db.transaction() as session:
        job = repository.get_job(session, "never-preempt")
    assert (job.status.value, job.vm) == ("QUEUED", None), (
        f"a job accepting standard VMs only was {job.status.value} on {job.vm}, a VM Zen recorded as spot")
