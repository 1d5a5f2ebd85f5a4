"""A retry's failure lines stay on the job while the retry waits (docs/reference/cli.md, `zen jobs get`). A late
FAILED counted as the retry (zen.jobs.late_final) is such a failure: its lines are the job's message too (they were
dropped), unless the retry was claimed already (its own message then)."""

from __future__ import annotations

from tests.test_late_final_reports import final, job, run_then_go_silent
from tests.messages import job_request


def test_a_late_failure_counted_as_the_retry_keeps_its_lines(functions, zen, clock):
    functions.submit(job_request("job-r", max_retries=2, retry_backoff_s=0))
    run_then_go_silent(functions, clock, "job-r")
    functions.heartbeat(final("job-r", "FAILED", 3))  # message="done": the failed attempt's last lines
    record = job(zen, "job-r")
    assert (record.status.value, record.attempt, record.retries) == ("QUEUED", 2, 1)
    assert record.message == "done", record.message
