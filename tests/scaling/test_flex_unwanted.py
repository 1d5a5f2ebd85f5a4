"""A flex-start request whose jobs all went (cancelled, or started on another VM) stayed queued for 2 x
``flex_start_estimate_s`` (30 min) before a pass cancelled it as stuck; granted meanwhile, its VMs booted and
were billed with nothing to do. Cancelled at the first pass now (``ZenPlanner``'s cancel_losers)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tests.scaling.fakes import FakeFleet, RecordingMig
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigInstance
from zen.scaling.pricing import cluster_pools

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


def test_a_flex_start_request_whose_jobs_went_is_cancelled_within_the_idle_bound():
    """The gang that asked for it was cancelled: nothing is queued. Its request is unbilled while queued,
    and a grant now would bill 2 VMs with nothing to do; it should go within ``idle_timeout_s`` (300 s)."""
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=["us-central1"],
                           max_vms_per_region=4, max_vms=8, provisioning=["flex-start"])
    pools = cluster_pools(config)
    [key] = pools
    calls: list = []
    pending = [MigInstance(f"zen-c+zen-req1+{i}", None, "CREATING", "", None) for i in range(2)]
    mig = RecordingMig(key, calls, 2, pending)
    t = [NOW]
    fleet = FakeFleet(FleetFacts((), {}, {}, {}, 0), NOW)
    m = ClusterManager(config, fleet, {key: mig}, lambda: t[0], Timing(), ZenPlanner(), telemetry=False, pools=pools)
    gone_at = None
    while (t[0] - NOW).total_seconds() <= 3600:
        if m.run().deleted:
            gone_at = (t[0] - NOW).total_seconds()
            break
        fleet._facts = FleetFacts((), {}, {}, fleet.recorded[-1][0], 0)  # the memory the pass recorded
        t[0] += timedelta(minutes=1)
    assert gone_at is not None and gone_at <= Timing().idle_timeout_s, f"cancelled after {gone_at} s"
