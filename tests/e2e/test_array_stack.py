"""End to end: a job array on the whole local stack. One message of 4 tasks with ``max_parallel: 2``:
every task runs with its index and parameter, all succeed, and at no moment do more than 2 hold a VM,
although the cluster may run 3 VMs. Run alone with `pytest -m e2e`."""

from __future__ import annotations

import sys

import pytest

from tests.stack_support import ended, running_stack, submit_as

pytestmark = pytest.mark.e2e

CONFIG = """
project: zen-arrays
clusters:
  - name: 1xl4
    gpu_type: nvidia-l4
    gpu_count: 1
    machine_type: g2-standard-8
    regions: [us-central1]
    max_vms_per_region: 3
    max_vms: 3
deadlines:
  heartbeat_timeout_s: 20
  boot_timeout_s: 120
  idle_timeout_s: 30
  stop_timeout_s: 30
  agent_heartbeat_s: 2
  stop_grace_s: 2
scaling:
  boot_estimate_s: 5
"""

RATES = ("0.1", "0.01", "0.001", "0.0001")

SCENARIO = """
project: zen-arrays
seed: 5
time_scale: 10
capacity:
  default: 3
timings:
  boot: {dist: fixed, s: 20}
  retry_interval_s: 30
  delete_s: 10
"""


def test_an_array_runs_every_task_with_at_most_max_parallel_at_once(home):
    from zen.store.db import Database

    with running_stack(home, CONFIG, SCENARIO, start=27000) as stack:
        command = [sys.executable, "-c", "import os, time; time.sleep(3); "
                   "print('task', os.environ['ZEN_ARRAY_INDEX'], 'lr', os.environ['LR'])"]
        submit_as(stack, "demo", {"job_id": "sweep", "user_id": "demo", "cluster": "1xl4", "command": command,
                                  "array": {"params": [{"LR": lr} for lr in RATES], "max_parallel": 2}})
        jobs = ended([f"sweep-{i}" for i in range(4)], 180)
        with Database.from_env().transaction() as session:
            rows = session.sql("SELECT job_id, at, to_status FROM job_events WHERE job_id LIKE 'sweep-%' ORDER BY at, id")
    assert [j.status.value for j in jobs] == ["SUCCEEDED"] * 4, [(j.job_id, j.status.value, j.message) for j in jobs]
    for i, job in enumerate(jobs):
        assert f"task {i} lr {RATES[i]}" in (job.message or ""), job.message
    holding, most = set(), 0  # tasks let go (QUEUED) and not ended, as the history orders the changes
    for row in rows:
        if row["to_status"] == "QUEUED":
            holding.add(row["job_id"])
        elif row["to_status"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            holding.discard(row["job_id"])
        most = max(most, len(holding))
    assert most == 2, rows
