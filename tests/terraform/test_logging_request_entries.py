"""The request entries Cloud Run writes for every push to a function (log ``run.googleapis.com/requests``,
about 1 KB each, one a heartbeat: some 120 GiB a month at 1,000 running jobs) are excluded from ingestion
where the function answered the push (terraform/logging.tf); a failed push keeps its entry, and no line
Zen writes itself, which the log-based metrics read, is excluded."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.terraform.hcl import Module
from tests.terraform.logging_query import entry_from_line, matches
from tests.terraform.test_monitoring import metrics, render
from tests.zen_lines import zen_lines

PROJECT = "p"


@pytest.fixture(scope="module")
def module() -> Module:
    return Module.load()


def exclusion(module: Module) -> str:
    """The exclusion's filter as Cloud Logging receives it (the default name_prefix)."""
    resource = module.resources_of("google_logging_project_exclusion")["function_requests"]
    assert resource["count"] == "${var.function_request_logs ? 0 : 1}"
    assert resource["filter"] == "${local.function_requests_answered}"
    assert module.variables["function_request_logs"]["default"] is False, "excluded unless a deployment keeps them"
    prefix = module.variables["name_prefix"]["default"]
    return render(module.locals["function_requests_answered"], {"var.name_prefix": prefix})


def request_entry(service: str, status: int) -> dict:
    """A request entry as Cloud Run writes it for an Eventarc push (the fields a filter may read)."""
    return {"severity": "INFO" if status < 400 else "ERROR",
            "logName": f"projects/{PROJECT}/logs/run.googleapis.com%2Frequests",
            "resource": {"type": "cloud_run_revision", "labels": {"service_name": service, "location": "us-central1"}},
            "httpRequest": {"requestMethod": "POST", "status": status, "latency": "0.012s"}}


FUNCTIONS = ("zen-on-heartbeat", "zen-on-job-submitted", "zen-on-stop-requested", "zen-on-scale-tick",
             "zen-on-job-event")


def test_the_request_entries_of_answered_pushes_are_excluded_and_failed_ones_kept(module):
    query = exclusion(module)
    for service in FUNCTIONS:
        for status in (200, 204):
            assert matches(query, request_entry(service, status)), (service, status)
        for status in (429, 500, 503):
            assert not matches(query, request_entry(service, status)), (service, status)
    for service in ("zen-console", "someone-elses-service", "my-zen-on-heartbeat"):
        assert not matches(query, request_entry(service, 200)), service


def test_no_line_zen_writes_is_excluded(module, functions, clock):
    """Zen's own lines (stderr), which every log-based metric reads, pass the exclusion whatever they say."""
    with zen_lines() as stream:
        functions.submit(job_request("j"))
        functions.heartbeat(heartbeat("j", "CLAIMED", 1))
        functions.heartbeat(heartbeat("j", "RUNNING", 2))
        functions.heartbeat({"garbage": 1})
        clock.advance(60)
        functions.tick()
        functions.heartbeat(heartbeat("j", "SUCCEEDED", 3, exit_code=0))
    query, filters = exclusion(module), [m["filter"] for m in metrics(module).values()]
    entries = [entry_from_line(line, service=service, project=PROJECT) for line in stream.getvalue().splitlines()
               if line.strip() for service in FUNCTIONS]
    assert any(matches(f, e) for f in filters for e in entries)  # lines the metrics read are among them
    assert [e for e in entries if matches(query, e)] == []
