"""A silent attempt on a VM of a pool the configuration dropped while the VM ran it: the tick forgot the pool's
instances (``fleet.forget_dropped_pools``: kept in vm_lifetimes as seen until then), and no pass lists that pool
again. Its agent silent later (its network, its guest: the VM still runs until terraform destroys the MIG), the
sweep was told the VM "left its MIG" since its last report (vm_stop_seen read the forgotten lifetime as one a pass
saw leave), and the attempt of a spot VM was requeued unspent, its history saying a scaling pass saw what none
did. No pass saw that VM stop: the attempt is spent as any silent one (``zen.jobs.cloud_silence``)."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_claims_by_recorded_model import _zen
from zen.store import fleet, repository

CLUSTER = "4xa100-40gb"
SPOT_VM = "zen-4xa100-40gb-us-central1-spot-ab12"  # the spot pool's (standard is the primary)
POOL = "us-central1/spot"


def test_a_silent_vm_of_a_dropped_pool_spends_its_attempt(config, db, publisher, clock, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = _zen(config, db, publisher, clock, ["standard", "spot"])
    with zen.db.transaction() as session:
        fleet.see_instances(session, CLUSTER, POOL, [SPOT_VM], clock(), billed=[SPOT_VM], model="spot")
    clock.advance(30)
    functions.submit(job_request("j", cluster=CLUSTER, max_attempts=1))
    functions.heartbeat(heartbeat("j", "CLAIMED", 1, vm=SPOT_VM))
    functions.heartbeat(heartbeat("j", "RUNNING", 2, vm=SPOT_VM))
    zen, functions = _zen(config, db, publisher, clock, ["standard"])  # the spot pool dropped while the job runs
    clock.advance(50)
    with zen.db.transaction() as session:  # as the tick does after its scaling pass
        forgotten = fleet.forget_dropped_pools(session, {c.name: c.pools() for c in zen.config.clusters})
    assert forgotten.get((CLUSTER, POOL)) == [SPOT_VM], forgotten
    clock.advance(50)
    functions.heartbeat(heartbeat("j", "RUNNING", 3, vm=SPOT_VM))  # still running: heard after the pool was forgotten
    for _ in range(4):  # then silent; no pass lists its pool any more
        clock.advance(50)
        functions.tick()
    with zen.db.transaction() as tx:
        job = repository.get_job(tx, "j")
        last = repository.job_history(tx, "j")[-1]["reason"]
    assert job.status.value == "FAILED", (job.status.value, job.attempt, last)
