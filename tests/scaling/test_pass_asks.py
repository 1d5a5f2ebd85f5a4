"""A submission whose pass finds the cluster's lock held is not left for the next tick: it asks for a
pass (``zen.scaling.asks``), and the pass holding the lock runs again once it lets go, its snapshot
having been read before the job arrived. Nobody waits: the asker returns at once."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime, timezone

from tests.messages import job_request
from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_scaling_integration import CLUSTER, stack  # noqa: F401 - the fixture
from zen.core.config import ClusterConfig
from zen.scaling.manager import MAX_RERUNS, ClusterManager
from zen.scaling.model import Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, Kept

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


def test_a_job_submitted_during_another_s_pass_gets_its_vm_from_that_pass_s_rerun(stack, monkeypatch):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    real = ClusterManager.snapshot
    submitted = []

    def snapshot(self, report, states=None, read_at=None):
        out = real(self, report, states, read_at)
        if not submitted:  # b arrives (on another instance) while a's pass holds the lock, its facts read
            submitted.append(fn.submit(job_request("b", regions=["us-west1"])))
        return out

    scaled = []
    real_scale = zen.scaler.scale
    monkeypatch.setattr(zen.scaler, "scale", lambda cluster: scaled.append(real_scale(cluster)) or scaled[-1])
    monkeypatch.setattr(ClusterManager, "snapshot", snapshot)
    fn.submit(job_request("a", regions=["us-west1"]))
    b_pass, a_pass = scaled  # b's (nested, inside a's pass) returned first
    assert b_pass.skipped and not b_pass.added  # it did not wait for the lock
    assert not a_pass.skipped and a_pass.added == {"us-west1": 2}  # a's, then b's on the rerun
    assert len(instances("us-west1")) == 2


class Asks:
    """A PassAsks in memory; ``on_read`` runs at each read of the count (another instance asking then)."""

    def __init__(self):
        self.count, self.on_read = 0, None

    def ask(self, cluster: str) -> int:
        self.count += 1
        return self.count

    def asked(self, cluster: str) -> int:
        if self.on_read is not None:
            self.on_read()
        return self.count


class Locking(FakeFleet):
    """A fleet whose cluster lock is held by someone else for the first ``busy`` tries."""

    def __init__(self, facts, first_seen, busy: int = 0):
        super().__init__(facts, first_seen)
        self.busy, self.passes = busy, 0

    @contextmanager
    def cluster_lock(self, cluster: str):
        if self.busy:
            self.busy -= 1
            yield Kept(False)
            return
        self.passes += 1
        yield Kept()


def manager(asks: Asks, busy: int = 0) -> tuple[ClusterManager, Locking]:
    fleet = Locking(FleetFacts((), {}, {}, {}, 0), NOW, busy)
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=["us-west1"],
                           max_vms_per_region=4, max_vms=4)
    return ClusterManager(config, fleet, {"us-west1": RecordingMig("us-west1", [])}, lambda: NOW, Timing(),
                          ZenPlanner(), telemetry=False, asks=asks), fleet


def test_an_ask_made_after_the_holder_let_go_is_served_by_the_asker_s_second_try():
    """The holder read the count after letting go and saw no ask; the asker's second try of the lock
    (after its ask) then finds it free and runs the pass itself."""
    asks = Asks()
    m, fleet = manager(asks, busy=1)
    report = m.run()
    assert asks.count == 1 and fleet.passes == 1 and not report.skipped


def test_an_asker_that_finds_the_lock_held_twice_returns_at_once():
    asks = Asks()
    m, fleet = manager(asks, busy=2)
    report = m.run()
    assert report.skipped and asks.count == 1 and fleet.passes == 0


def test_the_holder_runs_again_while_passes_are_asked_at_most_max_reruns_times():
    asks = Asks()
    m, fleet = manager(asks)
    asks.on_read = lambda: setattr(asks, "count", asks.count + 1)  # someone asks during every pass
    report = m.run()
    assert fleet.passes == 1 + MAX_RERUNS and not report.skipped
    asks.on_read = None
    m.run()
    assert fleet.passes == 2 + MAX_RERUNS  # nothing asked: one pass


def test_passes_that_took_long_leave_the_asks_to_the_tick(monkeypatch):
    """A pass may take long (each Compute call up to CALL_BOUND_S): reruns after a slow pass could take a
    submission past its function's timeout (and Pub/Sub would push it again). Past RERUN_WITHIN_S, no rerun."""
    from zen.scaling import manager as module

    monkeypatch.setattr(module, "RERUN_WITHIN_S", 0.0)
    asks = Asks()
    m, fleet = manager(asks)
    asks.on_read = lambda: setattr(asks, "count", asks.count + 1)
    m.run()
    assert fleet.passes == 1
