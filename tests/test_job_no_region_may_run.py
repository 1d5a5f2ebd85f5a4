"""A queued job whose required tag no region of its carries any more (the configuration changed while it waited):
the tick, before its scaling pass, sends the job back to PENDING, held with the reason (`zen explain` names the
tag), no longer demand: no VM is asked for it, and the VM booted for it before the change, whose claim is refused,
goes as any idle VM does. Left QUEUED, it was kept idle, billed, for as long as the job waited. Once the
configuration carries the tag again, the tick lets the job go there."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, build_stack, vm_beat
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.app import Zen
from zen.core.config import ZenConfig
from zen.scaling.manager import ClusterOrchestrator
from zen.store import repository


def _tags(config, region_tags):
    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster["region_tags"] = region_tags
    return ZenConfig.model_validate(raw)


def test_a_job_no_region_can_run_is_no_demand_and_explain_says_why(config, db, publisher, clock, monkeypatch,
                                                                    tmp_path):
    from zen.cli.queues import explain_line
    from zen_dev.local.invoke import FunctionsInvoker

    tagged = _tags(config, {"us-west1": ["hipaa"]})
    old, advance, instances, standin = build_stack(tagged, db, publisher, clock, monkeypatch, tmp_path)
    try:
        FunctionsInvoker(old).submit(job_request("phi", requires_tags=["hipaa"]))  # its pass boots a VM in us-west1
        before = [vm.name for vm in instances("us-west1")]
        # The operator drops hipaa from us-west1 (the job's only cleared region) while the job waits.
        changed = _tags(config, {})
        clients = compute_clients_from_env()
        scaler = ClusterOrchestrator(changed, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients))
        zen = Zen(changed, db, publisher, clock, scaler=scaler)
        fn = FunctionsInvoker(zen)
        fn.tick()
        booted = instances("us-west1")
        with zen.db.transaction() as session:
            job = repository.get_job(session, "phi")
            why = explain_line(session, changed, job)
        print("VMs booted for it:", [vm.name for vm in booted])
        print("explain:", why)
        advance(BOOT_S + 1)
        for vm in instances("us-west1"):  # its agent (old template: still says hipaa) claims it, refused
            fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 1, sent_at=clock().isoformat()))
            fn.heartbeat(heartbeat("phi", "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone, tags=["hipaa"]))
        for minute in range(2, 60):  # an hour: the VM idles, its agent heard every minute
            advance(60)
            for vm in instances("us-west1"):
                fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", minute, sent_at=clock().isoformat()))
            fn.tick()
        left = instances("us-west1")
        print("VMs after an hour:", [vm.name for vm in left])
        assert len(before) == 1 and [vm.name for vm in booted] == before, "a VM asked for a job no region may run"
        assert left == [], "GPU VMs kept for a job no region may run"
        with zen.db.transaction() as session:
            held = repository.get_job(session, "phi")
            why = explain_line(session, changed, held)
        assert held.status.value == "PENDING" and "hipaa" in why, why

        # The tag is back on us-west1: the tick after the next look lets it go there, its start published.
        fn = FunctionsInvoker(Zen(tagged, db, publisher, clock, scaler=None))
        advance(300)
        fn.tick()
        with zen.db.transaction() as session:
            again = repository.get_job(session, "phi")
            history = [row["reason"] for row in repository.job_history(session, "phi")]
        assert (again.status.value, again.regions, again.hold) == ("QUEUED", ["us-west1"], None), history
        assert history[-1] == "admitted: the configuration lets it run in ['us-west1'] again", history
    finally:
        standin.stop()


def test_jobs_held_so_are_looked_at_apart_from_the_retries_due(config, db, publisher, clock):
    """Held longer, such a job came first in the retry pass (longest due first, 500 a tick): thousands held at once
    delayed every retry behind them. They are looked at in a pass of their own."""
    from tests.messages import agent_run
    from tests.test_tags import functions_with

    zen, fn = functions_with(config, db, publisher, clock, {"us-west1": ["hipaa"]})
    fn.submit(job_request("phi", requires_tags=["hipaa"]))
    zen, fn = functions_with(config, db, publisher, clock, {})
    fn.heartbeat(heartbeat("phi", "CLAIMED", 1, vm="vm-old", region="us-west1", zone="us-west1-b", tags=["hipaa"]))
    clock.advance(1)
    fn.submit(job_request("r", max_retries=1, retry_backoff_s=300))
    for beat in agent_run("r", attempt=1, vm="vm-1", final="FAILED", exit_code=3):
        fn.heartbeat(beat)
    clock.advance(400)  # both due: phi's hold since earlier
    zen.jobs.sweeps.retry_due(limit=1, held=0)
    with zen.db.transaction() as session:
        retried, held = repository.get_job(session, "r"), repository.get_job(session, "phi")
    assert (retried.status.value, retried.attempt) == ("QUEUED", 2), retried
    assert held.status.value == "PENDING"
