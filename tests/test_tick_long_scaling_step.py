"""A scale tick whose scaling step runs past its function's timeout (many clusters and regions, Compute slow to
answer: each call bounded, 8 at a time) stops before its next step (``Zen.on_scale_tick``), and that step made the
VMs' control subscriptions (``zen.adapters.control_subscriptions``), made by nothing else: while every tick's
scaling step ran that long, no VM got one, so none heard a CONFIRM, a RELEASE or a STOP, and each agent gave up
waiting for its subscription; jobs waited for VMs that never became usable. The subscriptions of the VMs earlier
passes listed are made before the scaling step too."""

from __future__ import annotations

import time

from zen.store import fleet

TIMEOUT_S = 1.0  # the function's timeout here; terraform sets the tick's (240 s)


class _LongScaling:
    """Zen's scaler port: each tick's scaling step runs past the function's timeout."""

    def covered(self, cluster, regions=None):
        return True

    def racing(self, cluster):
        return False

    def scale(self, cluster):
        return None

    def tick(self):
        time.sleep(TIMEOUT_S + 0.2)  # Compute answering slowly
        return {}


class _RecordingControls:
    """Zen's control-subscription port: records the VMs whose subscriptions it was asked to make."""

    def __init__(self):
        self.made: set[str] = set()

    def ensure(self, instances, gone=None, left=None) -> int:
        new = {vm for vm, _, _ in instances} - self.made
        self.made |= new
        return len(new)


def test_a_tick_whose_scaling_step_runs_past_its_timeout_still_makes_control_subscriptions(zen, clock):
    with zen.db.transaction() as session:  # listed by a submission's pass, booting
        fleet.see_instances(session, "4xa100-40gb", "us-central1", ["zen-a-1"], clock())
    zen.timeout_s, zen.scaler, zen.controls = TIMEOUT_S, _LongScaling(), _RecordingControls()

    report = zen.on_scale_tick()

    assert report.cut is not None  # the scaling step ran past the timeout
    assert zen.controls.made == {"zen-a-1"}
