"""A job that becomes QUEUED inside a scale tick (admitted from its queue's line, or its retry let go) after a tag it
requires left its regions is narrowed to the regions that carry the tag before the same tick's scaling pass: no
GPU VM is asked for where it cannot run. The Compute stand-in and a real Postgres."""

from __future__ import annotations

import json

from tests.messages import job_request
from tests.scaling.test_scaling_integration import CLUSTER, build_stack
from tests.test_tags import with_region_tags
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.app import Zen
from zen.core.config import ZenConfig
from zen.jobs.placement import regions_cleared_now
from zen.scaling.manager import ClusterOrchestrator
from zen.store import repository

REGIONS = ("us-central1", "us-west1", "europe-west4")


def _cfg(config, region_tags, queues=None):
    """The configuration with the cluster's regions carrying ``region_tags`` (and ``queues``, if given)."""
    tagged = with_region_tags(config, region_tags)
    if queues is None:
        return tagged
    return ZenConfig.model_validate({**json.loads(tagged.model_dump_json()), "queues": queues})


def _zen_with_scaler(cfg, db, publisher, clock):
    clients = compute_clients_from_env()
    scaler = ClusterOrchestrator(cfg, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients))
    return Zen(cfg, db, publisher, clock, scaler=scaler)


def _job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def test_a_job_admitted_from_its_queue_in_the_tick_is_narrowed_before_its_scaling_pass(
        config, db, publisher, clock, monkeypatch, tmp_path):
    from zen_dev.local.invoke import FunctionsInvoker

    q = lambda gpus: [{"name": "research", "quota": {CLUSTER: gpus}, "users": ["alice"]}]  # noqa: E731
    before = _cfg(config, {"us-west1": ["hipaa"]}, queues=q(4))  # one 4-GPU job at a time
    # The operator moves hipaa to europe-west4 and raises the queue's quota, in one apply.
    after = _cfg(config, {"europe-west4": ["hipaa"]}, queues=q(8))
    old, _, instances, standin = build_stack(before, db, publisher, clock, monkeypatch, tmp_path)
    try:
        old.scaler = None  # no pass ran before the change
        fn = FunctionsInvoker(old)
        fn.submit(job_request("blocker", regions=["europe-west4"]))  # admitted: the quota is full
        fn.submit(job_request("phi", requires_tags=["hipaa"]))  # waits in the queue's line, regions [us-west1]
        assert _job(old, "phi").status.value == "PENDING"

        zen = _zen_with_scaler(after, db, publisher, clock)
        FunctionsInvoker(zen).tick()
        phi = _job(zen, "phi")
        vms = {r: len(instances(r)) for r in REGIONS}
        assert phi.status.value == "QUEUED"  # admitted by the tick's admission pass (quota raised)
        assert phi.regions == regions_cleared_now(after, phi) == ["europe-west4"], (
            f"admitted in the tick after the narrowing pass: still allowed {phi.regions}, where hipaa no longer is")
        assert vms["us-west1"] == 0, f"a GPU VM was asked for in us-west1, which cannot run phi: {vms}"
    finally:
        standin.stop()


def test_a_retry_let_go_in_the_tick_is_narrowed_before_its_scaling_pass(
        config, db, publisher, clock, monkeypatch, tmp_path):
    """No queues: a job in its retry's backoff while the operator moves its tag. The tick's ``retry_due`` lets it go
    QUEUED with its old regions; the narrowing pass after it moves it to the region carrying the tag."""
    from tests.messages import heartbeat
    from zen_dev.local.invoke import FunctionsInvoker

    before = _cfg(config, {"us-west1": ["hipaa"]})
    after = _cfg(config, {"europe-west4": ["hipaa"]})
    old, _, instances, standin = build_stack(before, db, publisher, clock, monkeypatch, tmp_path)
    try:
        old.scaler = None
        fn = FunctionsInvoker(old)
        fn.submit(job_request("phi", requires_tags=["hipaa"], max_retries=1, retry_backoff_s=60))
        where = dict(vm="vm-w", region="us-west1", zone="us-west1-a", tags=["hipaa"])
        fn.heartbeat(heartbeat("phi", "CLAIMED", 1, **where))
        fn.heartbeat(heartbeat("phi", "RUNNING", 2, **where))
        fn.heartbeat(heartbeat("phi", "FAILED", 3, exit_code=1, message="boom", **where))
        waiting = _job(old, "phi")
        assert (waiting.status.value, waiting.hold_until is not None) == ("PENDING", True), waiting

        clock.advance(61)  # the backoff is over; meanwhile hipaa moved to europe-west4
        zen = _zen_with_scaler(after, db, publisher, clock)
        FunctionsInvoker(zen).tick()
        phi = _job(zen, "phi")
        vms = {r: len(instances(r)) for r in REGIONS}
        assert phi.status.value == "QUEUED"
        assert vms["us-west1"] == 0, f"a GPU VM was asked for in us-west1, which cannot run phi: {vms}"
        assert phi.regions == ["europe-west4"], phi.regions
    finally:
        standin.stop()
