"""A job held PENDING at a refused claim (claims.held_uncleared) keeps its attempt: the tick lets the same attempt go
again. A VM whose claim of that attempt comes while the job is PENDING is told RELEASE ("not admitted") and drops its
copy of the start; its claim's seq is a floor (refused_floor), so the same claim delivered again after the tick let
the job go is a late one. Without the floor it won: the job ASSIGNED to a VM that runs nothing."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.test_tags import orders_of, with_region_tags
from zen.store import repository


def _fn(config, db, publisher, clock, tags):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker
    zen = Zen(with_region_tags(config, tags), db, publisher, clock, scaler=None)
    return zen, FunctionsInvoker(zen)


def _job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def test_a_claim_heard_while_held_delivered_again_after_the_hold_is_lifted_does_not_win(config, db, publisher, clock):
    E = int(clock().timestamp() * 1000)  # epoch-ms seqs, as agents send (refused_floor needs them)
    zen, fn = _fn(config, db, publisher, clock, {"us-west1": ["hipaa"]})
    fn.submit(job_request("phi", requires_tags=["hipaa"], regions=["us-west1"]))
    zen, fn = _fn(config, db, publisher, clock, {})  # hipaa dropped from us-west1 while it waits
    west = dict(region="us-west1", zone="us-west1-b", tags=["hipaa"])
    fn.heartbeat(heartbeat("phi", "CLAIMED", E + 1, vm="vm-a", **west))  # refused: held PENDING
    assert _job(zen, "phi").status.value == "PENDING"
    late = heartbeat("phi", "CLAIMED", E + 2, vm="vm-b", **west)  # another copy of the start, claimed meanwhile
    fn.heartbeat(late)
    assert orders_of(publisher, "vm-b") == ["RELEASE"]  # vm-b drops its copy of the start

    zen, fn = _fn(config, db, publisher, clock, {"us-west1": ["hipaa"]})  # the operator puts hipaa back
    clock.advance(301)
    fn.tick()
    assert _job(zen, "phi").status.value == "QUEUED"
    fn.heartbeat(heartbeat("phi", "CLAIMED", E + 1, vm="vm-a", **west))  # vm-a's claim delivered again: ignored
    assert _job(zen, "phi").vm is None
    fn.heartbeat(late)  # vm-b's claim delivered again (Pub/Sub at least once)
    job = _job(zen, "phi")
    assert job.vm != "vm-b", "a VM told RELEASE, that dropped its copy of the start, won the attempt"
