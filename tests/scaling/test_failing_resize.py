"""A pool whose resize keeps failing (its region's Compute answers 503 to writes while reads work, or
refuses the resize: 403/400) was asked again by every pass and never struck: the planner learned nothing
from a failed ADD. Where the pool is not hedged (a region that delivered lately, with ``scaling.hedge_risk``
above 0), its jobs waited for ever though other allowed regions had capacity. A failed resize now strikes
its pool as a stockout does (``zen.scaling.planner.strike``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tests.messages import heartbeat, job_request
from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, build_stack, vm_beat
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager, ClusterOrchestrator
from zen.scaling.model import DemandGroup, RegionMemory, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigUnconfirmed

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
REGIONS = ["us-central1", "us-west1"]


class FailingResize(RecordingMig):
    def resize(self, size, together=()):
        self.calls.append(("resize failed", self.region, size))
        raise MigUnconfirmed("resize on zen-test-us-central1 failed: ServiceUnavailable: 503 (sent: it may still be "
                             "carried out)")


def test_a_region_whose_resize_keeps_failing_does_not_hold_its_jobs_for_ever():
    calls: list = []
    migs = {"us-central1": FailingResize("us-central1", calls), "us-west1": RecordingMig("us-west1", calls)}
    memory = {r: RegionMemory(last_boot_at=NOW - timedelta(minutes=5)) for r in REGIONS}  # both delivered lately
    demand = (DemandGroup(tuple(REGIONS), 1, NOW),)
    fleet = FakeFleet(FleetFacts(demand, {}, {}, memory, 0), NOW)
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=REGIONS,
                           max_vms_per_region=4, max_vms=4)
    t = [NOW]
    m = ClusterManager(config, fleet, migs, lambda: t[0], Timing(hedge_risk=0.2), ZenPlanner(), telemetry=False)
    for _ in range(30):  # half an hour of ticks
        m.run()
        fleet._facts = FleetFacts(demand, {}, {}, {**memory, **fleet.recorded[-1][0]}, 0)
        t[0] += timedelta(minutes=1)
    failed = [c for c in calls if c[0] == "resize failed"]
    assert ("resize", "us-west1", 1) in calls, f"{len(failed)} failed resizes of us-central1, us-west1 never asked"


def test_end_to_end_a_regional_write_outage_holds_the_job_though_the_next_region_has_gpus(
        config, db, publisher, clock, monkeypatch, tmp_path):
    from zen_dev.local.invoke import FunctionsInvoker

    config = config.model_copy(update={"scaling": config.scaling.model_copy(update={"hedge_risk": 0.2})})
    capacity = {"default": 4}  # every region has GPUs
    faults = {"unavailable": [{"region": "us-central1", "methods": ["resize"], "from_s": 1000}]}
    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path,
                                                   capacity=capacity, faults=faults)
    try:
        clients = compute_clients_from_env()
        zen.scaler = ClusterOrchestrator(config, db, clock, lambda p, r, n, model: MigManager(
            p, r, n, *clients, call_bound_s=0.5))  # the 503s are retried 10 s per call otherwise
        fn = FunctionsInvoker(zen)
        regions = ["us-central1", "us-west1"]
        fn.submit(job_request("a", regions=regions))  # both regions deliver once (the job and its hedge)
        advance(BOOT_S + 1)
        vms = [(r, i) for r in regions for i in instances(r)]
        assert {r for r, _ in vms} == set(regions)
        for seq, (region, vm) in enumerate(vms, start=1):
            fn.heartbeat(vm_beat(vm.name, region, "IDLE", seq, sent_at=clock().isoformat()))
        fn.tick()
        region, vm = vms[0]
        fn.heartbeat(heartbeat("a", "CLAIMED", 1, vm=vm.name, region=region, zone=vm.zone))
        fn.heartbeat(heartbeat("a", "SUCCEEDED", 2, vm=vm.name, region=region, zone=vm.zone, exit_code=0))
        fn.heartbeat(vm_beat(vm.name, region, "IDLE", 10, sent_at=clock().isoformat()))
        advance(1000)  # both idle out and are deleted; us-central1's resizes now answer 503
        fn.tick()
        assert not instances("us-central1") and not instances("us-west1")
        fn.submit(job_request("b", regions=regions))
        for _ in range(15):  # a quarter of an hour of ticks
            advance(60)
            fn.tick()
        booted = instances("us-central1") + instances("us-west1")
        with zen.db.transaction() as session:
            why = [r["reason"] for r in session.run("recent_scaling_decisions", cluster=CLUSTER, limit=2)]
        assert booted, f"job b still has no VM after 15 minutes; the last decisions: {why}"
    finally:
        standin.stop()
