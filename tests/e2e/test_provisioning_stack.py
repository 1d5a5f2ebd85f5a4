"""End to end: a cluster that lists two provisioning models ([spot, standard]) on the whole local stack.
The Compute stand-in serves one MIG per pool; a job that accepts standard VMs only runs on a VM of the
standard pool's MIG (``<MIG>-std-xxxx``), one that accepts any runs, and the idle VMs go. Run alone with
`pytest -m e2e`."""

from __future__ import annotations

import sys

import pytest

from tests.stack_support import ended, running_stack, submit_as

pytestmark = pytest.mark.e2e

CONFIG = """
project: zen-pools
clusters:
  - name: 1xl4
    gpu_type: nvidia-l4
    gpu_count: 1
    machine_type: g2-standard-8
    regions: [us-central1, us-east4]
    max_vms_per_region: 2
    max_vms: 4
    provisioning: [spot, standard]
deadlines:
  heartbeat_timeout_s: 20
  boot_timeout_s: 120
  idle_timeout_s: 10
  stop_timeout_s: 30
  agent_heartbeat_s: 2
  stop_grace_s: 2
scaling:
  boot_estimate_s: 5
"""

SCENARIO = """
project: zen-pools
seed: 3
time_scale: 10
capacity:
  default: 4
timings:
  boot: {dist: fixed, s: 40}
  retry_interval_s: 30
  delete_s: 10
"""


def test_a_two_model_cluster_runs_each_job_on_a_vm_it_accepts(home, stack_forks):
    from zen.store.db import Database

    with running_stack(home, CONFIG, SCENARIO, start=28000, forks=stack_forks) as stack:
        command = [sys.executable, "-c", "print('hello from a pool')"]
        for job_id, accepts in (("std-1", "standard"), ("any-2", "any")):
            submit_as(stack, "demo", {"job_id": job_id, "user_id": "demo", "cluster": "1xl4", "command": command,
                                      "provisioning": accepts})
        jobs = dict(zip(("std-1", "any-2"), ended(["std-1", "any-2"], 150)))
        with Database.from_env().transaction() as session:
            decisions = session.sql("SELECT region, action FROM scaling_decisions WHERE action = 'ADD'")
    assert {j: (job.status.value if job else None) for j, job in jobs.items()} == {
        "std-1": "SUCCEEDED", "any-2": "SUCCEEDED"}, (jobs, decisions)
    std = jobs["std-1"]
    assert std is not None and std.vm is not None and std.vm.startswith(f"zen-1xl4-{std.region}-std-")
    assert any(d["region"].endswith("/standard") for d in decisions)  # the standard pool was asked for
