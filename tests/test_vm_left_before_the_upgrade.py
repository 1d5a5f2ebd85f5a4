"""A spot VM that left its MIG, forgotten by a scaling pass of the release before migration 0062 (its lifetime kept
without ``left_at``: before the upgrade, or by that release's functions still deployed between ``zen db migrate``
and ``terraform apply``), while its job's silence was not yet swept. The release that wrote the row read it as a VM
a pass saw leave; the sweep of the next release read its NULL ``left_at`` as a dropped pool's VM that no pass saw
go: the attempt, taken by the cloud, was spent as lost, and a job of one attempt FAILED (its budget spent) where
it was requeued unspent, told preempted (``zen.jobs.cloud_silence``). A NULL ``left_at`` is read as the release
that wrote it read it; a dropped pool's lifetime says it was never seen go (``-infinity``)."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_claims_by_recorded_model import _zen
from zen.store import fleet, repository

CLUSTER = "4xa100-40gb"
SPOT_VM = "zen-4xa100-40gb-us-central1-spot-cd34"  # the spot pool's (standard is the primary)
POOL = "us-central1/spot"

# The release before 0062's forget_vanished_instances, as its scaling pass ran it: the lifetime kept without left_at.
_EARLIER_FORGET = """
WITH gone AS (
    DELETE FROM mig_instances
    WHERE cluster = :cluster AND region = :region AND NOT (name = ANY(CAST(:present AS text[])))
    RETURNING name, cluster, region, first_seen_at, last_seen_at, running_at, model, billed_before, usd_per_hour
), lived AS (
    INSERT INTO vm_lifetimes (name, cluster, region, first_seen_at, last_seen_at, running_at, model, billed_before,
                              usd_per_hour)
    SELECT name, cluster, region, first_seen_at, last_seen_at, running_at, model, billed_before, usd_per_hour FROM gone
    ON CONFLICT (name, first_seen_at) DO NOTHING
)
SELECT name FROM gone ORDER BY name
"""


def test_a_spot_vm_an_earlier_release_saw_leave_is_taken_as_preempted(config, db, publisher, clock, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = _zen(config, db, publisher, clock, ["standard", "spot"])
    with zen.db.transaction() as session:
        fleet.see_instances(session, CLUSTER, POOL, [SPOT_VM], clock(), billed=[SPOT_VM], model="spot")
    clock.advance(30)
    functions.submit(job_request("j", cluster=CLUSTER, max_attempts=1))
    functions.heartbeat(heartbeat("j", "CLAIMED", 1, vm=SPOT_VM))
    functions.heartbeat(heartbeat("j", "RUNNING", 2, vm=SPOT_VM))
    clock.advance(50)
    with zen.db.transaction() as session:  # GCE took the VM; the earlier release's pass saw it gone from its MIG
        gone = session.sql(_EARLIER_FORGET, cluster=CLUSTER, region=POOL, present=[])
    assert [r["name"] for r in gone] == [SPOT_VM]
    for _ in range(4):  # the new release's ticks sweep the silent attempt
        clock.advance(50)
        functions.tick()
    with zen.db.transaction() as tx:
        job = repository.get_job(tx, "j")
        reasons = [row["reason"] for row in repository.job_history(tx, "j")]
    assert (job.status.value, job.attempt) == ("QUEUED", 2), (job.status.value, job.attempt, reasons[-1])
    assert any("taken as preempted" in reason for reason in reasons), reasons
