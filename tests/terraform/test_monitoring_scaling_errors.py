"""A cluster whose scaling passes keep failing (a Compute role removed, a MIG deleted by hand, a query the database
refuses after an upgrade) neither adds VMs for queued jobs nor deletes idle ones, which keep billing. Each tick still
ran to its end (``scale_tick.done``), so no alert fired: the failures were an ERROR decision (``zen explain CLUSTER``)
and a log line. The alert "scaling passes of a cluster keep failing" counts the ``scaling.decision`` lines with action
ERROR (``zen_scaling_decisions``): a pass failing every minute fires it within 10 minutes, though a failure is written
at most once a minute per function instance (so every other tick, at worst); one failed pass retried by the next does
not. Its runbook's log query finds the failure's own line, which names the error."""

from __future__ import annotations

import re
from datetime import timedelta

from tests.messages import job_request
from tests.scaling.test_failed_pass_recorded import Failing
from tests.scaling.test_scaling_integration import CLUSTER, stack  # noqa: F401  (the fixture)
from tests.terraform.logging_query import extract, matches
from tests.terraform.test_monitoring import captured, metrics, module, render  # noqa: F401  (the fixtures)
from zen.scaling.manager import ClusterOrchestrator

WINDOW_S = 600  # the alert's alignment period: failed passes counted over 10 minutes


def _alert(module):  # noqa: F811
    return module.locals["threshold_alerts"]["scaling_errors"]


def _failed_passes(module, entries) -> list[dict]:  # noqa: F811
    """The lines the alert counts for CLUSTER (its series): the decisions metric's, narrowed by the alert's filter on
    its labels."""
    alert, metric = _alert(module), metrics(module)["zen_scaling_decisions"]
    assert re.search(r'format\(local\.metric, "zen_scaling_decisions"\)', alert["filter"]), alert["filter"]
    wanted = dict(re.findall(r'metric\.label\.(\w+)=\\?"(\w+)\\?"', alert["filter"]))
    assert wanted == {"action": "ERROR"}, alert["filter"]
    return [e for e in entries if matches(metric["filter"], e) and e["jsonPayload"]["cluster"] == CLUSTER
            and all(extract(metric["labels"][k], e) == v for k, v in wanted.items())]


def _ticks(zen, advance, every_s: float, span_s: float) -> None:
    from zen_dev.local.invoke import FunctionsInvoker

    fn, waited = FunctionsInvoker(zen), 0.0
    while waited < span_s:
        fn.tick()
        advance(every_s)
        waited += every_s


def test_passes_failing_every_minute_fire_the_alert_and_one_failure_does_not(module, stack, captured, config, db,  # noqa: F811
                                                                             clock):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, _ = stack
    alert = _alert(module)
    assert alert["aligner"] == "ALIGN_DELTA" and alert["period"] == f"{WINDOW_S}s"
    assert alert["group_by"] == ["metric.label.cluster"]
    threshold = module.variables["alert_scaling_errors"]["default"]
    assert alert["threshold"] == "${var.alert_scaling_errors}"
    working = zen.scaler
    FunctionsInvoker(zen).submit(job_request("a"))

    zen.scaler = ClusterOrchestrator(config, db, clock, working._mig_factory, policy=Failing())
    _ticks(zen, advance, every_s=60, span_s=60)  # one pass fails ...
    zen.scaler = working
    _ticks(zen, advance, every_s=60, span_s=WINDOW_S)  # ... and the next ones succeed
    transient = _failed_passes(module, captured())
    assert len(transient) == 1
    assert len(transient) <= threshold

    began = clock()
    zen.scaler = ClusterOrchestrator(config, db, clock, working._mig_factory, policy=Failing())
    _ticks(zen, advance, every_s=59, span_s=WINDOW_S)  # a tick a little under a minute apart: every other one writes
    failing = _failed_passes(module, captured())[len(transient):]
    assert clock() - began <= timedelta(seconds=WINDOW_S + 59)
    assert len(failing) > threshold, (len(failing), threshold)


def test_the_scaling_errors_runbook_finds_the_failures_line(module, stack, captured, config, db, clock):  # noqa: F811
    zen, advance, _ = stack
    runbook = _alert(module)["runbook"]
    queries = re.findall(r"`(jsonPayload\.message[^`]*)`", runbook)
    assert queries, runbook
    assert "zen explain CLUSTER" in runbook
    zen.scaler = ClusterOrchestrator(config, db, clock, zen.scaler._mig_factory, policy=Failing())
    _ticks(zen, advance, every_s=60, span_s=60)
    functions_logs = render(module.locals["zen_function_logs"], {"var.name_prefix": module.variables["name_prefix"]["default"]})
    found = [e for e in captured() if any(matches(f"{functions_logs} AND {q}", e) for q in queries)]
    assert {e["jsonPayload"].get("cluster") for e in found} >= {CLUSTER}, queries
    assert all(e["severity"] == "ERROR" for e in found)
    assert any("the planner broke" in str(e["jsonPayload"]) for e in found), [e["jsonPayload"] for e in found]
