"""``zen_job_status_changes`` (terraform/monitoring.tf) counts what the jobs' history records.

The metric counts the ``job.status_changed`` lines its filter matches, by cluster and new status; ``zen stats``
counts the same figure from ``job_events`` (``zen.store.stats``, ``job_status_changes``). An array's tasks were
written PENDING with a history row each but no line: the chart and ``zen stats`` disagreed by every task an array
submission made, and more for a queued Zen, whose tasks wait PENDING.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

from tests.messages import agent_run, job_request
from tests.terraform.hcl import Module
from tests.terraform.logging_query import entry_from_line, extract, matches
from tests.terraform.test_monitoring import metrics
from tests.zen_lines import zen_lines
from zen.store import stats


def test_the_status_change_metric_counts_an_arrays_tasks_as_their_history_does(zen_and_fn):
    zen, fn = zen_and_fn
    metric = metrics(Module.load())["zen_job_status_changes"]
    since = datetime(2000, 1, 1, tzinfo=timezone.utc)
    with zen_lines() as stream:
        fn.submit(job_request("sweep", array={"params": [{"LR": "0.1"}, {"LR": "0.01"}, {"LR": "0.001"}],
                                              "max_parallel": 1}))
        fn.submit(job_request("single"))
        for beat in agent_run("sweep-0", vm="vm-a"):
            fn.heartbeat(beat)
    entries = [entry_from_line(line) for line in stream.getvalue().splitlines() if line.strip()]
    charted = Counter((extract(metric["labels"]["cluster"], e), extract(metric["labels"]["status"], e))
                      for e in entries if matches(metric["filter"], e))
    with zen.db.transaction() as session:
        recorded = Counter({(r["cluster"], r["status"]): r["changes"]
                            for r in stats.run(session, "job_status_changes", since=since)})
    assert recorded[("4xa100-40gb", "PENDING")] == 4  # three tasks and the job
    assert charted == recorded
