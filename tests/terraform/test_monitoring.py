"""The operator's view (terraform/monitoring*.tf) against the log lines the code really writes.

The scenario drives Zen through the functions (functions-framework, real CloudEvents) with the
Compute stand-in behind the official client and a stocked-out preferred region: submissions,
scaling passes, a stockout, claims and starts, rejections of every class, a lost attempt and a
tick. Every JSON line ``zen.logs.JsonFormatter`` writes is captured and turned into the LogEntry
Cloud Logging stores; each ``google_logging_metric`` (parsed with python-hcl2) must then match some
of those entries, and its label and value extractors must find their fields in every entry it
matches. Renaming an event or a field on either side fails here.
"""

from __future__ import annotations

import re

import pytest

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import stack  # noqa: F401  (the fixture)
from tests.terraform.hcl import ROOT, Module
from tests.terraform.logging_query import MISSING, entry_from_line, extract, matches
from tests.zen_lines import zen_lines
from zen import telemetry
from zen.store.db import Database

MONITORING_FILES = ("monitoring.tf", "monitoring_dashboard.tf", "monitoring_alerts.tf", "monitoring_variables.tf")


@pytest.fixture(scope="module")
def module() -> Module:
    return Module.load()


def render(template: str, values: dict[str, str]) -> str:
    out = re.sub(r"\$\{([^}]+)\}", lambda m: values[m.group(1)], template)
    assert "${" not in out, out
    return out


def metrics(module: Module) -> dict[str, dict]:
    """Each log-based metric as Cloud Logging receives it: name -> filter, labels, value extractor."""
    resource = module.resources_of("google_logging_metric")["zen"]
    assert resource["for_each"] == "${local.log_metrics}"
    assert resource["label_extractors"] == "${try(each.value.labels, {})}"
    assert resource["value_extractor"] == "${try(each.value.value_extractor, null)}"
    prefix = module.variables["name_prefix"]["default"]
    functions_logs = render(module.locals["zen_function_logs"], {"var.name_prefix": prefix})
    return {name: {"filter": render(resource["filter"], {"local.zen_function_logs": functions_logs,
                                                         "each.value.filter": spec["filter"]}),
                   "labels": spec.get("labels", {}), "value": spec.get("value_extractor")}
            for name, spec in module.locals["log_metrics"].items()}


@pytest.fixture
def captured():
    """Every line Zen logs during the test, as Cloud Logging would store it."""
    with zen_lines() as stream:
        yield lambda: [entry_from_line(line) for line in stream.getvalue().splitlines() if line.strip()]


def play(zen, advance, clock, before_loss=lambda: None) -> None:
    """A stockout, starts, rejections of each class, a lost attempt, ticks."""
    from zen_dev.local.invoke import FunctionsInvoker

    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a"))
    fn.submit(job_request("b"))  # this pass reads us-central1's stockout: blocked
    fn.send("on_job_submitted", b"{not json")  # malformed
    fn.send("on_stop_requested", {"job_id": "nobody"})  # unknown
    fn.send("on_job_submitted", job_request("a", user_id="mallory"))  # forbidden: job_id reused
    advance(42)
    started = clock()
    for seq, status in enumerate(["CLAIMED", "RUNNING"], start=1):
        fn.heartbeat(heartbeat("a", status, seq, vm="vm-w", region="us-west1", zone="us-west1-a",
                               sent_at=started.isoformat()))
    fn.send("on_heartbeat", heartbeat("a", "RUNNING", 3, attempt=7, vm="vm-w", region="us-west1"))  # forbidden
    advance(60)
    fn.tick()
    before_loss()
    advance(zen.config.deadlines.heartbeat_timeout_s + 1)
    fn.tick()  # job a's VM went silent: LOST, requeued


def test_every_log_metric_matches_lines_the_code_writes(module, stack, captured, clock):  # noqa: F811
    zen, advance, _ = stack
    play(zen, advance, clock)
    entries = captured()
    events = {e["jsonPayload"].get(telemetry.EVENT) for e in entries}
    assert set(telemetry.FIELDS) <= events, f"events never written: {set(telemetry.FIELDS) - events}"
    for entry in entries:  # each event line carries exactly its declared fields
        payload = entry["jsonPayload"]
        if telemetry.EVENT in payload:
            extra = set(payload) - {telemetry.EVENT, "message", "time", "logger"}
            assert extra == set(telemetry.FIELDS[payload[telemetry.EVENT]]), payload
    for name, metric in metrics(module).items():
        matched = [e for e in entries if matches(metric["filter"], e)]
        assert matched, f"{name}: its filter matches no line the code writes: {metric['filter']}"
        for label, extractor in metric["labels"].items():
            values = [extract(extractor, e) for e in matched]
            assert all(v is not MISSING for v in values) or label == "region", (name, label, extractor)
            assert any(v not in (MISSING, "") for v in values), (name, label, extractor)
        if metric["value"] is not None:
            for entry in matched:
                value = extract(metric["value"], entry)
                assert isinstance(value, (int, float)) and not isinstance(value, bool), (name, entry)
    by_name = {n: [e for e in entries if matches(m["filter"], e)] for n, m in metrics(module).items()}
    # The figures mean what they say.
    assert [extract("EXTRACT(jsonPayload.time_to_start_s)", e) for e in by_name["zen_time_to_start"]] == [42.0]
    assert {e["jsonPayload"]["job_id"] for e in by_name["zen_lost_attempts"]} == {"a"}
    assert {extract("EXTRACT(jsonPayload.kind)", e) for e in by_name["zen_mig_errors"]} == {"STOCKOUT"}
    assert {extract("EXTRACT(jsonPayload.reason_class)", e) for e in by_name["zen_rejected_messages"]} == {
        "malformed", "unknown", "forbidden"}
    assert any(extract("EXTRACT(jsonPayload.blocked)", e) == 1 for e in by_name["zen_region_blocked"])
    assert {"ADD", "BLOCK"} <= {extract("EXTRACT(jsonPayload.action)", e) for e in by_name["zen_scaling_decisions"]}


def test_a_renamed_field_or_event_no_longer_matches(module):
    """The evaluator is not vacuous: drift on either side is seen."""
    line = ('{"severity": "WARNING", "message": "message rejected", "event": "message.rejected", "source": "t",'
            ' "message_id": "m", "job_id": null, "reason": "x", "reason_class": "malformed"}')
    metric = metrics(module)["zen_rejected_messages"]
    entry = entry_from_line(line, service="zen-on-heartbeat")
    assert matches(metric["filter"], entry)
    assert extract(metric["labels"]["reason_class"], entry) == "malformed"
    assert not matches(metric["filter"], entry_from_line(line.replace("message.rejected", "message.refused")))
    assert not matches(metric["filter"], entry_from_line(line, service="other-service"))
    assert not matches(metric["filter"], entry_from_line(line.replace("WARNING", "INFO")))
    renamed = entry_from_line(line.replace('"reason_class"', '"reason_kind"'))
    assert extract(metric["labels"]["reason_class"], renamed) is MISSING


def test_lines_under_the_agents_log_names_feed_no_metric(module):
    """Metrics read the functions' log names only: a line as an agent ships it (log zen-jobs, or the
    VM's own logs), even one dressed as a function's (its resource and service name), matches none."""
    assert 'logName=~"/logs/run.googleapis.com%2F(stderr|stdout)$"' in module.locals["zen_function_logs"]
    line = ('{"severity": "WARNING", "message": "outbox backlog", "event": "outbox.backlog", "pending": 9,'
            ' "oldest_age_s": 9999}')
    own = entry_from_line(line, service="zen-on-scale-tick")
    every = metrics(module)
    assert any(matches(m["filter"], own) for m in every.values())
    for log_name in ("zen-jobs", "zen-agent", "syslog", "run.googleapis.com%2Fstderr-not"):
        forged = {**own, "logName": f"projects/p/logs/{log_name}"}
        assert not [name for name, m in every.items() if matches(m["filter"], forged)], log_name
    shipped = {**own, "logName": "projects/p/logs/zen-jobs", "resource": {"type": "gce_instance", "labels": {}}}
    assert not [name for name, m in every.items() if matches(m["filter"], shipped)]


def test_data_rejections_are_classed_as_data(db: Database):
    from zen.core.errors import DataRejected

    with pytest.raises(DataRejected) as refused:
        with db.transaction() as session:
            session.sql("SELECT CAST(:v AS integer) AS n", v="not a number")
    assert telemetry.reason_class(refused.value.reason) == "data"


def test_metric_names_are_the_shared_vocabulary_and_charts_use_only_them(module):
    names = set(module.locals["log_metrics"])
    assert names == set(telemetry.METRICS)
    texts = [s for f in MONITORING_FILES for s in _strings(module.files[f])]
    used = {m for text in texts for m in re.findall(r'format\(local\.(?:log_metric_type|metric), "(\w+)"\)', text)}
    assert used and used <= names
    assert used == names  # every metric is charted or alerted on


def test_each_alert_has_a_runbook_and_notifies_the_channels(module):
    policies = module.resources_of("google_monitoring_alert_policy")
    alerts = module.locals["threshold_alerts"]
    assert set(alerts) == {"dead_letter", "lost_attempts", "stocked_out", "oldest_queued", "scaling_errors", "outbox",
                           "db_connections"}
    assert set(policies) == {"zen", "scale_tick_missing"}
    for body in policies.values():
        assert body["notification_channels"] == "${var.notification_channels}"
        assert body["documentation"][0]["mime_type"] == "text/markdown"
    for name, alert in alerts.items():
        assert len(alert["runbook"].splitlines()) >= 3, name
    dashboard = module.resources_of("google_monitoring_dashboard")["zen"]
    assert "local.dashboard_tiles" in dashboard["dashboard_json"]
    links = module.locals["links_text"]
    assert "local.job_scheduler_logs_query" in links and "local.vm_logs_query" in links


def _strings(value):
    from tests.terraform.hcl import strings

    return list(strings(value))


def test_the_runbooks_change_clusters_through_the_configuration_not_deprecated_variables(module):
    """The lost-attempts runbook said to use on-demand VMs with `spot = false` (ignored for a cluster that lists
    `provisioning`, and standard already for one that does not), the stockout one to add regions in terraform's
    `clusters` (deprecated: a list naming only the cluster changed fails the plan)."""
    alerts = module.locals["threshold_alerts"]
    lost, stocked = (" ".join(alerts[name]["runbook"].split()) for name in ("lost_attempts", "stocked_out"))
    assert "spot = false" not in lost and "`provisioning`" in lost and "Changing a cluster" in lost
    assert "terraform `clusters`" not in stocked and "`regions` in the Zen configuration" in stocked


def test_the_dead_letter_alert_watches_the_notifiers_dead_letters_too(module):
    """zen-job-events-dead-letter (a job event whose notices kept failing, or the notifier's database down) was
    watched by neither the dead-letter alert nor the dashboard: FAILED and LOST notices were lost unseen."""
    assert "notifier_dead_letter" in module.resources_of("google_pubsub_subscription")
    assert "local.dead_letter_subscriptions" in module.locals["threshold_alerts"]["dead_letter"]["filter"]
    assert "google_pubsub_subscription.notifier_dead_letter.name" in module.locals["dead_letter_subscriptions"]


def test_the_dead_letter_runbook_replays_messages_with_their_attributes(module):
    """The replay step said to publish each message's data: a job event republished without its attributes never
    reaches the notifier (its subscription filters on ``attributes.status``), and a submission's or heartbeat's
    proof of its sender is in its attributes too."""
    from zen.core.notify import NOTICE_FILTER

    assert "attributes.status" in NOTICE_FILTER
    runbook = " ".join(module.locals["threshold_alerts"]["dead_letter"]["runbook"].split())
    assert "with its attributes" in runbook and "--attribute=" in runbook
    row = next(line for line in (ROOT / "docs" / "how-to" / "operate.md").read_text().splitlines()
               if line.startswith("| a dead-letter subscription is not empty"))
    assert "with its attributes" in row
