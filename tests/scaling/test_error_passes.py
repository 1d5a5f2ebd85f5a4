"""One MIG of a cluster that cannot be read (a region whose MIG terraform has not made yet: 404; or a region
whose Compute answers 503 for an hour) makes every pass of the cluster report an error. A pass with an error
left no ``Coverage`` (``ClusterOrchestrator.scale``), so ``racing`` said yes for ever: every job's end (a VM
back to IDLE) ran a full pass of its cluster (every MIG read again, the failing call repeated), where a
healthy cluster with no boot in flight runs none. Such a pass now leaves one that spares no submission but
says what it left booting."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, CountingPlanner, build_stack, vm_beat
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.scaling.manager import ClusterOrchestrator


def _passes_for_jobs(config, db, publisher, clock, monkeypatch, tmp_path, broken: str | None, jobs: int = 5):
    from zen_dev.local.invoke import FunctionsInvoker

    extra = {}
    if broken == "outage":  # europe-west4's Compute answers 503 to everything (the client retries within 10 s)
        extra = {"faults": {"unavailable": [{"region": "europe-west4"}]}}
    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path, **extra)
    try:
        if broken == "missing":  # europe-west4's MIG not created yet (the region was added to the configuration first)
            name = config.cluster(CLUSTER).mig_name("europe-west4")
            with standin.world.lock:
                del standin.world.migs[("europe-west4", name)]
        clients = compute_clients_from_env()
        migs: list[MigManager] = []

        def factory(project, region, name, model):
            migs.append(MigManager(project, region, name, *clients, call_bound_s=0.5))
            return migs[-1]

        planner = CountingPlanner()
        zen.scaler = ClusterOrchestrator(config, db, clock, factory, policy=planner)
        fn = FunctionsInvoker(zen)
        fn.submit(job_request("a", regions=["us-west1"]))
        advance(BOOT_S + 1)
        [vm] = [i for i in instances("us-west1") if i.running]
        beat = 1
        fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", beat, sent_at=clock().isoformat()))
        fn.heartbeat(heartbeat("a", "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone))
        fn.heartbeat(heartbeat("a", "SUCCEEDED", 2, vm=vm.name, region="us-west1", zone=vm.zone, exit_code=0))
        fn.tick()
        before, calls = planner.passes[CLUSTER], sum(m.api_calls for m in migs)
        for n in range(jobs):  # short jobs on the one idle VM, between two ticks
            job = f"j{n}"
            scaler, zen.scaler = zen.scaler, None  # submissions aside: only the job ends' passes are counted
            fn.submit(job_request(job, regions=["us-west1"]))
            zen.scaler = scaler
            beat += 1
            fn.heartbeat(vm_beat(vm.name, "us-west1", "BUSY", beat, sent_at=clock().isoformat()))
            fn.heartbeat(heartbeat(job, "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone))
            fn.heartbeat(heartbeat(job, "SUCCEEDED", 2, vm=vm.name, region="us-west1", zone=vm.zone, exit_code=0))
            beat += 1
            fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", beat, sent_at=clock().isoformat()))
            clock.advance(1)
        return planner.passes[CLUSTER] - before, sum(m.api_calls for m in migs) - calls
    finally:
        standin.stop()


def test_healthy_cluster_runs_no_pass_when_its_vms_finish_jobs_and_nothing_boots(config, db, publisher, clock,
                                                                                monkeypatch, tmp_path):
    passes, calls = _passes_for_jobs(config, db, publisher, clock, monkeypatch, tmp_path, broken=None)
    assert passes == 0 and calls == 0


@pytest.mark.parametrize("broken", ["missing", "outage"])
def test_one_unreadable_mig_does_not_turn_every_job_end_into_a_full_pass(
        config, db, publisher, clock, monkeypatch, tmp_path, broken):
    passes, calls = _passes_for_jobs(config, db, publisher, clock, monkeypatch, tmp_path, broken=broken)
    assert passes <= 1, f"{passes} passes and {calls} Compute calls for 5 job ends between two ticks (healthy: 0)"
