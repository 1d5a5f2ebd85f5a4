"""The outbox alert's runbook (terraform/monitoring_alerts.tf) sends operators to log lines that "give the error":
its queries must find the lines Zen writes when publishing fails, and those lines must carry the error.

The "outbox publish failed for N message(s)" line named a count only (the error was kept on the outbox rows, in
Postgres), and the runbook's query compared the whole message with ``=`` to a text ending in "...", which no line is.
"""

from __future__ import annotations

import re

from tests.messages import job_request
from tests.terraform.hcl import Module
from tests.terraform.logging_query import entry_from_line, matches
from tests.terraform.test_monitoring import render
from tests.zen_lines import zen_lines


def test_the_outbox_runbooks_queries_find_lines_that_say_what_failed(zen_and_fn, publisher):
    zen, fn = zen_and_fn
    module = Module.load()
    runbook = module.locals["threshold_alerts"]["outbox"]["runbook"]
    queries = re.findall(r"`(jsonPayload\.message[^`]*)`", runbook)
    assert queries, runbook
    functions_logs = render(module.locals["zen_function_logs"], {"var.name_prefix": module.variables["name_prefix"]["default"]})
    publisher.fail_next = 10  # Pub/Sub refuses the next publishes: the rows wait for the tick
    with zen_lines() as stream:
        fn.submit(job_request("a"))
        fn.tick()
    entries = [entry_from_line(line, service="zen-on-job-submitted") for line in stream.getvalue().splitlines()
               if line.strip()]
    found = [e for e in entries if any(matches(f"{functions_logs} AND {q}", e) for q in queries)]
    assert any(e["jsonPayload"]["message"].startswith("outbox publish failed") for e in found), queries
    for entry in found:
        assert "injected publish failure" in entry["jsonPayload"].get("error", ""), entry["jsonPayload"]
