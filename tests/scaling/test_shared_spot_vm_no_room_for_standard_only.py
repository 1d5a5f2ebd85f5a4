"""[spot, standard] -> [standard] on a cluster whose VMs run several jobs at once (``max_jobs_per_vm`` > 1): the
primary MIG keeps its name and its VMs booted as spot stay spot. Such a VM refuses the claim of a job that accepts
standard VMs only (``zen.jobs.claims``), so neither its room beside the jobs it runs nor the VM itself idle is that
job's supply (``zen.scaling.sharing.absorb``; one job per VM: tests/test_spot_vm_no_supply_for_standard_only.py)."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import vm_beat
from tests.test_claims_by_recorded_model import CLUSTER, SPOT_VM
from zen.core.config import ZenConfig
from zen.store import fleet

TWO_GPUS = dict(cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=2, regions=["us-central1"])  # CLUSTER, 4 GPUs


def _zen(config, db, publisher, clock, models):
    """Zen with ``CLUSTER``'s VMs running two jobs each and its models ``models``."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster.update(provisioning=models, max_jobs_per_vm=2)
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    return zen, FunctionsInvoker(zen)


def _narrowed(config, db, publisher, clock):
    """The spot VM seen by a pass while spot was the cluster's first model, then spot removed from it."""
    before, _ = _zen(config, db, publisher, clock, ["spot", "standard"])
    with before.db.transaction() as session:  # a scaling pass lists the spot pool's VM, RUNNING, as the tick does
        fleet.see_instances(session, CLUSTER, "us-central1", [SPOT_VM], clock(), model="spot")
    return _zen(config, db, publisher, clock, ["standard"])


def _scale(zen, db, clock):
    from tests.scaling.fakes import RecordingMig
    from zen.scaling.manager import ClusterOrchestrator
    from zen.scaling.port import MigInstance

    primary = zen.config.cluster(CLUSTER).mig_name("us-central1")

    def mig(project, region, name, model):
        listed = [MigInstance(SPOT_VM, "us-central1-a", "NONE", "RUNNING", None)] if name == primary else []
        return RecordingMig(region, [], target=len(listed), instances=listed)

    return ClusterOrchestrator(zen.config, db, clock, mig).scale(CLUSTER)


def test_a_busy_spot_vms_room_is_no_supply_for_a_standard_only_job(config, db, publisher, clock, db_url, monkeypatch):
    """The spot VM runs a 2-GPU job of any model and has 2 GPUs and a slot free: counted as room for the queued
    standard-only 2-GPU job, no VM was asked for it, and every claim of the job's on the spot VM was refused: it
    waited for as long as the VM was up."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = _narrowed(config, db, publisher, clock)
    functions.heartbeat(vm_beat(SPOT_VM, "us-central1", "IDLE", 1, sent_at=clock().isoformat(), jobs=[]))
    functions.submit(job_request("any-model", **TWO_GPUS))
    functions.heartbeat(heartbeat("any-model", "CLAIMED", 1, vm=SPOT_VM))
    functions.heartbeat(heartbeat("any-model", "RUNNING", 2, vm=SPOT_VM))
    functions.submit(job_request("never-preempt", provisioning="standard", **TWO_GPUS))

    report = _scale(zen, db, clock)
    assert report.added == {"us-central1": 1}, (report.added, [d.reason for d in report.decisions])


def test_an_idle_spot_vm_is_no_supply_for_a_standard_only_job_where_vms_run_several(
        config, db, publisher, clock, db_url, monkeypatch):
    """The demand of a cluster sharing its VMs comes from ``absorb``, whose groups named no model: the idle spot
    VM was the standard-only job's, as before the planner learned the models a group accepts."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = _narrowed(config, db, publisher, clock)
    functions.heartbeat(vm_beat(SPOT_VM, "us-central1", "IDLE", 1, sent_at=clock().isoformat(), jobs=[]))
    functions.submit(job_request("never-preempt", provisioning="standard", **TWO_GPUS))

    report = _scale(zen, db, clock)
    assert report.added == {"us-central1": 1}, (report.added, [d.reason for d in report.decisions])


def test_jobs_of_one_model_and_of_any_still_pack_together_on_new_vms():
    """Apart by the model they accept, a standard-only and an any-model 2-GPU job were asked a 4-GPU VM each where one
    holds both (of its pool's model, which both take); the standard-only one keeps that VM as its group's."""
    from datetime import datetime, timezone

    from zen.scaling.model import Vm, VmPhase
    from zen.scaling.sharing import absorb

    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = [{"priority": 0, "regions": ["us-central1"], "gpus": 2, "jobs": 1, "oldest": now, "provisioning": model}
            for model in (None, "standard")]
    assert sorted((g.accepts or "", g.count) for g in absorb(rows, {}, [], 4, 2)) == [("", 0), ("standard", 1)]
    busy_spot = Vm("spot", "us-central1", VmPhase.BUSY, now, job_id="j", model="spot")
    assert sorted((g.accepts or "", g.count) for g in absorb(rows, {"spot": (1, 2)}, [busy_spot], 4, 2)) == [
        ("standard", 1)]  # the any-model job takes the spot VM's room, the standard-only one a new VM
