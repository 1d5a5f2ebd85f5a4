"""A pass's Compute calls are bounded: a region whose Compute answers 5xx costs the tick about
``CALL_BOUND_S`` per call (google-cloud-compute's defaults retried a 503 for 600 s, holding the tick's
and the cluster's locks), and the other regions and clusters still scale in that pass. End to end
(the Compute stand-in through the official client, a real Postgres)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.messages import job_request
from tests.scaling.test_scaling_integration import CLUSTER, build_stack
from zen.adapters import compute as mig_module


@pytest.fixture
def make_stack(config, db, publisher, clock, monkeypatch, tmp_path):
    started = []

    def make(**extra):
        built = build_stack(config, db, publisher, clock, monkeypatch, tmp_path, **extra)
        started.append(built[-1])
        return built

    yield make
    for standin in started:
        standin.stop()


def within(fn, limit_s: float):
    """``fn()`` and the seconds it took; a failure, not a wait of minutes, when it takes over ``limit_s``."""
    out: dict = {}
    began = time.monotonic()
    thread = threading.Thread(target=lambda: out.update(result=fn()), daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"still running after {limit_s:g} s"
    return out["result"], time.monotonic() - began


def test_one_region_answering_503_costs_the_tick_about_the_bound_and_the_others_still_scale(make_stack, monkeypatch):
    monkeypatch.setattr(mig_module, "CALL_BOUND_S", 1.0, raising=False)  # 10 s in production
    zen, advance, instances, standin = make_stack(faults={"unavailable": [{"region": "europe-west4", "to_s": 3600}]})
    scaler, zen.scaler = zen.scaler, None  # submissions without their own pass: the tick does it all
    from zen_dev.local.invoke import FunctionsInvoker

    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a", cluster="8xa100-40gb", regions=["us-west1"]))
    fn.submit(job_request("b", regions=["us-west1"]))
    zen.scaler = scaler
    try:
        reports, took = within(scaler.tick, 120)
    finally:
        standin.advance(3600)  # the outage ends: a tick still retrying (the old code's) can finish
    # europe-west4's list, then each of its 3 MIGs' get (at once), each about the bound: seconds.
    assert took < 15
    assert 0 < standin.outages.refused < 40
    assert len(instances("us-west1")) == 1 and len(instances("us-west1", "8xa100-40gb")) == 1  # both scaled
    assert any("europe-west4" in error for error in reports[CLUSTER].errors)


def test_a_pass_never_waits_for_its_operations(make_stack):
    """A resize's operation is DONE once its actions are scheduled; waiting on it (regionOperations.wait,
    up to 60 s per write, one after another) held the pass and the cluster's lock idle."""
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances, standin = make_stack(api={"operation_delay_s": 30})
    waits: list = []
    wait = standin.api._wait
    standin.api._wait = lambda *args: waits.append(args) or wait(*args)
    fn = FunctionsInvoker(zen)
    try:
        _, took = within(lambda: fn.submit(job_request("a")), 45)  # its pass: a VM and its hedge
    finally:
        standin.advance(60)  # the operations end: a pass still waiting (the old code's) can finish
    assert took < 10 and waits == []
    assert len(instances("us-central1")) == 1 and len(instances("us-west1")) == 1
