"""``zen watch`` (and the console, through ``vms_per_region``) counted a VM drained for a scale-down whose
delete failed as IDLE: its agent still says IDLE, but the VM refuses every claim (``vm_drains``) and the planner
counts it as going away; ``zen stats`` (``vms_by_state``) said DELETING for the same VM. While the delete kept
failing, a user saw an idle VM beside a queued job it would never take. It counts as STOPPING now."""

from __future__ import annotations

from datetime import datetime, timezone

from zen.cli.watch import vms_per_region
from zen.store import fleet, repository, stats

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_a_drained_vm_whose_delete_failed_is_not_shown_idle(db):
    with db.transaction() as session:
        fleet.see_instances(session, "c", "us-central1", ["vm-a", "vm-b"], NOW)
        for seq, name in enumerate(("vm-a", "vm-b")):
            repository.upsert_vm(session, name=name, cluster="c", region="us-central1", zone="us-central1-a",
                                 state="IDLE", job_id=None, attempt=None, seq=seq, sent_at=NOW, now=NOW)
        assert fleet.drain_unless_busy(session, "vm-b", "c", "us-central1", NOW)  # drained; its delete then failed
    with db.transaction() as session:
        [row], _ = vms_per_region(session)
        by_state = {r["state"]: r["vms"] for r in stats.run(session, "vms_by_state")}
    assert by_state == {"IDLE": 1, "DELETING": 1}  # zen stats: what the planner sees
    assert row["idle"] == 1, row  # was 2: the drained VM, which refuses claims, shown idle
