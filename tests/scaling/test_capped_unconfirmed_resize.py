"""A resize capped by max_vms_per_region whose operation Compute accepted but could not confirm is recorded as the
VMs asked, with the cap's reason: '(4 of 6 added: the per-MIG limit ...)' (the plan's ADD of 6 was kept whole).
Through the Compute stand-in and the official client."""

from __future__ import annotations

from tests.scaling.fakes import FakeFleet
from tests.scaling.test_manager_apply import Fixed
from tests.scaling.test_unconfirmed_writes import NOW, REGIONS, cloud  # noqa: F401 (fixture)
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Action, Decision, Plan, Timing
from zen.scaling.port import FleetFacts


def test_a_capped_resize_accepted_unconfirmed_says_how_many_were_added(cloud):  # noqa: F811
    standin, migs = cloud(api={"operation_delay_s": 30},
                          faults={"rate_limit": {"fraction": 1.0, "methods": ["operations.get", "operations.wait"]}})
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=4, regions=REGIONS,
                           max_vms_per_region=4, max_vms=8)
    fleet = FakeFleet(FleetFacts((), {}, {}, {}, 0), NOW)
    plan = Plan(add={"us-central1": 6}, decisions=[Decision(Action.ADD, "us-central1", "6 job(s)", 6)])
    manager = ClusterManager(config, fleet, migs, lambda: NOW, Timing(), Fixed(plan), telemetry=False, concurrent=False)
    report = manager.run()
    assert migs["us-central1"].target_size() == 4
    assert report.added == {"us-central1": 4}
    adds = [(d.action, d.count, d.reason) for d in report.decisions if d.region == "us-central1"]
    assert sum(c for a, c, _ in adds if a is Action.ADD) == 4, adds
