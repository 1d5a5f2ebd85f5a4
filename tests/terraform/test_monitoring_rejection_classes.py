"""``zen_rejected_messages``' ``reason_class`` label (terraform/monitoring.tf, ``zen.telemetry.reason_class``) for
a job id reused between jobs and arrays.

A job id another job holds is ``forbidden`` (valid, but not allowed: reuse); the same reuse between a job and an
array, or between two arrays, was labelled ``malformed``, so the chart showed users' id clashes as broken messages.
"""

from __future__ import annotations

from tests.messages import job_request
from tests.terraform.hcl import Module
from tests.terraform.logging_query import entry_from_line, extract, matches
from tests.terraform.test_monitoring import metrics
from tests.zen_lines import zen_lines


def test_a_job_id_reused_between_jobs_and_arrays_is_labelled_forbidden(zen_and_fn):
    zen, fn = zen_and_fn
    metric = metrics(Module.load())["zen_rejected_messages"]
    fn.submit(job_request("sweep", array={"count": 2}))
    fn.submit(job_request("plain"))
    fn.submit(job_request("taken-1"))
    fn.submit(job_request("a-1", array={"count": 2}))
    with zen_lines() as stream:
        fn.submit(job_request("sweep"))  # a job under an array's id
        fn.submit(job_request("plain", array={"count": 2}))  # an array under a job's id
        fn.submit(job_request("sweep", array={"count": 3}))  # another array under an array's id
        fn.submit(job_request("taken", array={"count": 3}))  # a task's id a job holds
        fn.submit(job_request("a", user_id="bob", array={"count": 2}))  # a task's id that is an array's
        fn.submit(job_request("taken-1", user_id="alice", command=["other"]))  # a job's id, by a job: as before
    entries = [entry_from_line(line, service="zen-on-job-submitted") for line in stream.getvalue().splitlines()
               if line.strip()]
    labelled = [(e["jsonPayload"]["reason"], extract(metric["labels"]["reason_class"], e))
                for e in entries if matches(metric["filter"], e)]
    assert len(labelled) == 6, labelled
    assert [(reason, label) for reason, label in labelled if label != "forbidden"] == []
