"""A job whose only pool's resize failed (Compute refused it, a 403 for a permission Zen's service account lacks;
or it was sent and never answered, a 503) waits while the pool is struck (``applied.struck``). Its HOLD, which
`zen explain` quotes, said "every allowed region is stocked out (us-central1); probes are waiting for capacity": the
region had GPUs and no probe was there, so an operator waited for capacity, or added regions, while every resize
failed. It says the resize failed, and Compute's words (``RegionMemory.resize_failed``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tests.messages import job_request
from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_scaling_integration import CLUSTER, build_stack
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.cli.queues import explain_job
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager, ClusterOrchestrator
from zen.scaling.model import Action, DemandGroup, RegionMemory, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigApiError

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
REFUSED = "resize_unary on zen-test-us-central1 failed: Forbidden: 403 Required 'compute.instanceGroupManagers.update'"


class RefusedResize(RecordingMig):
    def resize(self, size, together=()):
        raise MigApiError(REFUSED)  # a 4xx: nothing was done


def test_a_job_held_by_a_refused_resize_is_not_told_its_region_is_stocked_out():
    demand = (DemandGroup(("us-central1",), 1, NOW),)
    fleet = FakeFleet(FleetFacts(demand, {}, {}, {"us-central1": RegionMemory()}, 0), NOW)
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=["us-central1"],
                           max_vms_per_region=4, max_vms=4)
    t = [NOW]
    manager = ClusterManager(config, fleet, {"us-central1": RefusedResize("us-central1", [])}, lambda: t[0], Timing(),
                             ZenPlanner(), telemetry=False)
    manager.run()  # asks, is refused: the pool is struck
    fleet._facts = FleetFacts(demand, {}, {}, fleet.recorded[-1][0], 0)
    t[0] += timedelta(seconds=30)
    held = [d.reason for d in manager.run().decisions if d.action is Action.HOLD]
    assert held and not any("stocked out" in why or "probes" in why for why in held), held
    assert "resizing the MIG failed in us-central1" in held[0] and "403" in held[0], held


def test_end_to_end_explain_says_the_resize_failed(config, db, publisher, clock, monkeypatch, tmp_path, capsys):
    from zen_dev.local.invoke import FunctionsInvoker

    faults = {"unavailable": [{"region": "us-central1", "methods": ["resize"], "from_s": 0}]}
    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path,
                                                   capacity={"default": 4}, faults=faults)  # GPUs everywhere
    try:
        clients = compute_clients_from_env()
        zen.scaler = ClusterOrchestrator(config, db, clock, lambda p, r, n, model: MigManager(
            p, r, n, *clients, call_bound_s=0.3))  # the 503s are retried 10 s per call otherwise
        fn = FunctionsInvoker(zen)
        fn.submit(job_request("a", regions=["us-central1"]))  # its resize is sent, never answered: struck
        advance(30)
        fn.tick()
        assert not instances("us-central1")
        capsys.readouterr()
        assert explain_job("a", False, db) == 0
        said = capsys.readouterr().out
    finally:
        standin.stop()
    assert "stocked out" not in said and "probes are waiting" not in said, said
    assert "resizing the MIG failed in us-central1 (not confirmed" in said, said
