"""Configuration changes under jobs that wait or run: what the job then says (zen.jobs.claims, zen.jobs.sweeps,
zen.jobs.late_final, zen.jobs.flex_end) and what a scaling pass asks for it (zen.scaling.flexrun), through the functions
and the cluster's scaling pass against a real Postgres, the configuration changed between steps."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.test_tags import functions_with
from zen.store import repository


def job_of(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def test_a_late_final_report_ending_a_job_held_for_no_region_leaves_no_hold_on_it(config, db, publisher, clock,
                                                                                    db_url, monkeypatch):
    """hipaa leaves us-central1 while the job's attempt 1 runs there; its VM goes silent, the sweep requeues the
    job and the tick holds it (no region of its may run it now). Attempt 1's final report then ends it SUCCEEDED:
    `zen jobs get` showed the hold ("it waits until the configuration has one again") on the ended job."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = functions_with(config, db, publisher, clock, {"us-central1": ["hipaa"]})
    functions.submit(job_request("phi-1", requires_tags=["hipaa"]))
    functions.heartbeat(heartbeat("phi-1", "CLAIMED", 1, vm="vm-a", tags=["hipaa"]))
    functions.heartbeat(heartbeat("phi-1", "RUNNING", 2, vm="vm-a", tags=["hipaa"]))
    zen, functions = functions_with(config, db, publisher, clock, {})  # the operator removes the tag
    for _ in range(3):  # vm-a goes silent: taken for lost, requeued, held
        clock.advance(121)
        functions.tick()
    held = job_of(zen, "phi-1")
    assert (held.status.value, held.attempt) == ("PENDING", 2) and held.hold.startswith("no region of its may run")

    functions.heartbeat(heartbeat("phi-1", "SUCCEEDED", 3, vm="vm-a", exit_code=0, message="done", tags=["hipaa"]))
    ended = job_of(zen, "phi-1")
    assert (ended.status.value, ended.attempt, ended.vm) == ("SUCCEEDED", 1, "vm-a")
    assert (ended.hold, ended.hold_until) == (None, None)
    assert ended.public_view()["hold"] is None


def test_a_standard_only_job_is_not_claimed_by_a_spot_vm_after_spot_left_its_cluster(config, db, publisher, clock,
                                                                                      db_url, monkeypatch):
    """[spot, standard] -> [standard]: the primary MIG (``zen-<cluster>-<region>``) keeps its name, terraform gives it
    the standard template, and its VMs booted as spot stay spot (the MIG updates opportunistically). Read from its
    name under a one-model configuration, such a VM was taken for standard, and a job that accepts standard VMs
    only (never preempted) ran on it; the model a scaling pass recorded for it says spot."""
    from tests.test_claims_by_recorded_model import CLUSTER, SPOT_VM, _zen
    from zen.store import fleet

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    before, _ = _zen(config, db, publisher, clock, ["spot", "standard"])
    with before.db.transaction() as session:  # a scaling pass lists the spot pool's VM, as the tick does
        fleet.see_instances(session, CLUSTER, "us-central1", [SPOT_VM], clock(), model="spot")
    zen, functions = _zen(config, db, publisher, clock, ["standard"])  # spot removed from the cluster
    functions.submit(job_request("never-preempt", cluster=CLUSTER, provisioning="standard"))
    functions.heartbeat(heartbeat("never-preempt", "CLAIMED", 1, vm=SPOT_VM))
    job = job_of(zen, "never-preempt")
    assert (job.status.value, job.vm) == ("QUEUED", None), f"a standard-only job {job.status.value} on spot {job.vm}"

    functions.submit(job_request("any-model", cluster=CLUSTER))  # names no model: the spot VM left will do
    functions.heartbeat(heartbeat("any-model", "CLAIMED", 2, vm=SPOT_VM))  # (its refusal read the model it did not name)
    job = job_of(zen, "any-model")
    assert (job.status.value, job.vm) == ("ASSIGNED", SPOT_VM), (job.status.value, job.vm)



def _flex_zen(config, db, publisher, clock, models):
    """A Zen whose cluster uses ``models`` and whose flex-start VMs run for an hour."""
    from zen.app import Zen
    from zen.core.config import ZenConfig
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == "4xa100-40gb":
            cluster.update(provisioning=models, flex_start_run_s=3600)
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    return zen, FunctionsInvoker(zen)


def test_a_flex_start_vm_whose_run_ends_first_does_not_take_a_job_after_the_models_were_reordered(
        config, db, publisher, clock, db_url, monkeypatch):
    """[flex-start, standard] -> [standard, flex-start]: the primary MIG's VMs booted as flex-start stay so, and GCE
    deletes each at the end of its run (``flex_start_run_s``). Read from its name as standard, such a VM was not
    checked for what is left of its run, and took a job that outlasts any flex-start VM's run."""
    from zen.store import fleet

    vm = "zen-4xa100-40gb-us-central1-ab12"  # booted by the primary MIG while flex-start was the primary
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    before, _ = _flex_zen(config, db, publisher, clock, ["flex-start", "standard"])
    with before.db.transaction() as session:  # a scaling pass lists the flex-start pool's VM, as the tick does
        fleet.see_instances(session, "4xa100-40gb", "us-central1", [vm], clock(), model="flex-start")
    zen, functions = _flex_zen(config, db, publisher, clock, ["standard", "flex-start"])  # the models reordered
    functions.submit(job_request("long-run", cluster="4xa100-40gb", max_runtime_s=7200))
    functions.heartbeat(heartbeat("long-run", "CLAIMED", 1, vm=vm))
    job = job_of(zen, "long-run")
    assert (job.status.value, job.vm) == ("QUEUED", None), f"a 2 h job {job.status.value} on a 1 h flex VM {job.vm}"


def test_a_flex_start_vm_whose_run_ended_after_the_models_were_reordered_is_not_said_to_be_preempted(
        config, db, publisher, clock, db_url, monkeypatch):
    """[flex-start, standard] -> [standard, flex-start]: a VM the primary MIG booted as flex-start reaches the end of
    its run (GCE deletes it) and its agent reports its job PREEMPTED. Read from its name as standard, the job's
    history said "VM ... was preempted", and its user took it for a spot VM's preemption."""
    from zen.store import fleet

    vm = "zen-4xa100-40gb-us-central1-ab12"  # booted by the primary MIG while flex-start was the primary
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    before, _ = _flex_zen(config, db, publisher, clock, ["flex-start", "standard"])
    with before.db.transaction() as session:  # a scaling pass lists the flex-start pool's VM, RUNNING, as the tick does
        fleet.see_instances(session, "4xa100-40gb", "us-central1", [vm], clock(), model="flex-start")
    zen, functions = _flex_zen(config, db, publisher, clock, ["standard", "flex-start"])  # the models reordered
    functions.submit(job_request("short", cluster="4xa100-40gb"))
    functions.heartbeat(heartbeat("short", "CLAIMED", 1, vm=vm))
    functions.heartbeat(heartbeat("short", "RUNNING", 2, vm=vm))
    clock.advance(3600 - 30)  # its run's end (flex_start_run_s 3600) 30 s away
    functions.heartbeat(heartbeat("short", "PREEMPTED", 3, vm=vm, message=f"zen: VM {vm} shut down (SIGTERM)"))
    with zen.db.transaction() as session:
        [lost] = [r["reason"] for r in repository.all_job_events(session) if r["to_status"] == "LOST"]
    assert lost.startswith(f"VM {vm} reached the end of its flex-start run (flex_start_run_s 3600"), lost


def test_a_flex_start_vm_near_its_run_end_takes_no_job_after_flex_start_left_its_cluster(
        config, db, publisher, clock, db_url, monkeypatch):
    """[flex-start, standard] -> [standard]: the primary MIG's VMs booted as flex-start stay so until GCE deletes each
    at the end of its run. With flex-start no longer listed, a claim by such a VM 5 minutes from its run's end was
    not checked for what is left of its run when the job named no max_runtime_s: the job was started for GCE to cut
    it minutes later (its attempt lost, the VM's last minutes billed for nothing). The model a scaling pass recorded
    for the VM says flex-start, as it does with flex-start still listed."""
    from zen.store import fleet

    vm = "zen-4xa100-40gb-us-central1-ab12"  # booted by the primary MIG while flex-start was the primary
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    before, _ = _flex_zen(config, db, publisher, clock, ["flex-start", "standard"])
    with before.db.transaction() as session:  # a scaling pass lists the flex-start pool's VM, RUNNING, as the tick does
        fleet.see_instances(session, "4xa100-40gb", "us-central1", [vm], clock(), model="flex-start")
    zen, functions = _flex_zen(config, db, publisher, clock, ["standard"])  # flex-start removed from the cluster
    clock.advance(3600 - 300)  # its run's end (flex_start_run_s 3600) 5 minutes away, within flex_end_margin_s
    functions.submit(job_request("no-runtime-named", cluster="4xa100-40gb"))
    functions.heartbeat(heartbeat("no-runtime-named", "CLAIMED", 1, vm=vm))
    job = job_of(zen, "no-runtime-named")
    assert (job.status.value, job.vm) == ("QUEUED", None), f"{job.status.value} on {job.vm}, 5 min from its run's end"
    with zen.db.transaction() as session:
        [refused] = [r["reason"] for r in repository.list_rejections(session)]
    assert refused.startswith(f"VM {vm} is a flex-start VM with about"), refused


def test_a_flex_start_vm_near_its_run_end_is_no_supply_after_flex_start_left_its_cluster(
        config, db, publisher, clock, db_url, monkeypatch):
    """[flex-start, standard] -> [standard]: an idle VM the primary MIG booted as flex-start, 5 minutes from its run's
    end, refuses a job that names no max_runtime_s (above). The scaling pass took it for its pool's model as
    configured now (standard, no run's end) and counted it as that job's VM: no VM was asked for the job, which waited
    for GCE to end the VM's run (up to ``flex_start_run_s``, 7 days by default, for a job that outlasts what is left),
    the VM kept idle, billed. The model a pass recorded for the VM says flex-start, as the claim reads it."""
    from tests.scaling.fakes import RecordingMig
    from tests.scaling.test_scaling_integration import vm_beat
    from zen.scaling.manager import ClusterOrchestrator
    from zen.scaling.port import MigInstance
    from zen.store import fleet

    cluster, vm = "4xa100-40gb", "zen-4xa100-40gb-us-central1-ab12"  # booted while flex-start was the primary
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    before, _ = _flex_zen(config, db, publisher, clock, ["flex-start", "standard"])
    with before.db.transaction() as session:  # a scaling pass lists the flex-start pool's VM, RUNNING, as the tick does
        fleet.see_instances(session, cluster, "us-central1", [vm], clock(), model="flex-start")
    zen, functions = _flex_zen(config, db, publisher, clock, ["standard"])  # flex-start removed from the cluster
    functions.heartbeat(vm_beat(vm, "us-central1", "IDLE", 1, sent_at=clock().isoformat()))
    clock.advance(3600 - 300)  # its run's end (flex_start_run_s 3600) 5 minutes away, within flex_end_margin_s
    functions.heartbeat(vm_beat(vm, "us-central1", "IDLE", 2, sent_at=clock().isoformat()))
    functions.submit(job_request("no-runtime-named", cluster=cluster, regions=["us-central1"]))
    primary = zen.config.cluster(cluster).mig_name("us-central1")

    def mig(project, region, name, model):
        listed = [MigInstance(vm, "us-central1-a", "NONE", "RUNNING", None)] if name == primary else []
        return RecordingMig(region, [], target=len(listed), instances=listed)

    report = ClusterOrchestrator(zen.config, db, clock, mig).scale(cluster)
    assert report.added == {"us-central1": 1}, (report.added, [d.reason for d in report.decisions])
