"""The alert "the scale tick is not running" (``condition_absent`` on ``zen_scale_ticks``) against a tick that ran:
its ``scale_tick.done`` line is written once its work is done, whatever becomes of the figures read after it."""

from __future__ import annotations

from tests.scaling.test_scaling_integration import stack  # noqa: F401  (the fixture)
from tests.terraform.logging_query import matches
from tests.terraform.test_monitoring import captured, metrics, module  # noqa: F401  (the fixtures)


def test_a_tick_whose_figures_cannot_be_read_still_says_it_ran(module, stack, captured, monkeypatch):  # noqa: F811
    """The tick's figures (jobs in flight, the outbox backlog) are read after its work is done; when that read failed,
    the tick wrote no ``scale_tick.done`` either, and "the scale tick is not running" fired for a tick that ran, its
    runbook pointing at Cloud Scheduler and the tick's lock."""
    from zen.store import stats
    from zen_dev.local.invoke import FunctionsInvoker

    zen, _, _ = stack

    def refused(*args, **kwargs):
        raise RuntimeError("canceling statement due to statement timeout")

    monkeypatch.setattr(stats, "active_jobs", refused)
    FunctionsInvoker(zen).tick()
    metric = metrics(module)["zen_scale_ticks"]
    entries = captured()
    assert any("could not read the tick's figures" in e["jsonPayload"].get("message", "") for e in entries)
    assert [e for e in entries if matches(metric["filter"], e)], "no scale_tick.done line"
