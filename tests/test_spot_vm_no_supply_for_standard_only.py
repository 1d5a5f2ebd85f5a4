"""[spot, standard] -> [standard]: the primary MIG (``zen-<cluster>-<region>``) keeps its name and its VMs booted as
spot stay spot until they go. A job that accepts standard VMs only is refused by such a VM
(``tests/test_config_changes_under_jobs.py``); the scaling pass must not count it as that job's VM either."""

from __future__ import annotations

from tests.messages import job_request
from tests.test_claims_by_recorded_model import CLUSTER, SPOT_VM, _zen


def test_an_idle_spot_vm_is_no_supply_for_a_standard_only_job_after_spot_left_its_cluster(
        config, db, publisher, clock, db_url, monkeypatch):
    """Taken for its pool's model as configured now (standard), the idle spot VM was counted as the standard-only job's
    VM: no VM was asked for the job, whose every claim on the spot VM was refused, and the VM was kept idle as that
    job's, billed, for as long as the job waited: for ever."""
    from tests.scaling.fakes import RecordingMig
    from tests.scaling.test_scaling_integration import vm_beat
    from zen.scaling.manager import ClusterOrchestrator
    from zen.scaling.port import MigInstance
    from zen.store import fleet

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    before, _ = _zen(config, db, publisher, clock, ["spot", "standard"])
    with before.db.transaction() as session:  # a scaling pass lists the spot pool's VM, RUNNING, as the tick does
        fleet.see_instances(session, CLUSTER, "us-central1", [SPOT_VM], clock(), model="spot")
    zen, functions = _zen(config, db, publisher, clock, ["standard"])  # spot removed from the cluster
    functions.heartbeat(vm_beat(SPOT_VM, "us-central1", "IDLE", 1, sent_at=clock().isoformat()))
    functions.submit(job_request("never-preempt", cluster=CLUSTER, regions=["us-central1"], provisioning="standard"))
    primary = zen.config.cluster(CLUSTER).mig_name("us-central1")

    def mig(project, region, name, model):
        listed = [MigInstance(SPOT_VM, "us-central1-a", "NONE", "RUNNING", None)] if name == primary else []
        return RecordingMig(region, [], target=len(listed), instances=listed)

    report = ClusterOrchestrator(zen.config, db, clock, mig).scale(CLUSTER)
    assert report.added == {"us-central1": 1}, (report.added, [d.reason for d in report.decisions])
