"""A VM that runs several jobs at once (``max_jobs_per_vm``) says, in its last VM heartbeat (STOPPING) as in all its
others, the jobs it holds (none, once its attempts ended PREEMPTED): Zen takes a VM whose heartbeats list no jobs for
one that runs one job at a time, and bills an attempt that ends after it (its report read late, the sweep's) the whole
VM (tests/test_shared_vm_stopping_billed_its_share.py). Real agent, real scheduler (conftest.py)."""

from __future__ import annotations

from tests.agent.helpers import job_command, wait_for
from tests.agent.test_jobs_per_vm_integration import SHARED, config, submit_four_gpus  # noqa: F401 - the fixture


def test_a_shared_vms_stopping_heartbeat_lists_the_jobs_it_holds(scheduler, agents):
    jobs = ["long-1", "long-2"]
    for job_id in jobs:
        submit_four_gpus(scheduler, job_id, job_command("--first-attempt-sleep", "120", "--sleep", "0.2"))
    agent = agents.start("vm-a", ZEN_CLUSTER=SHARED)
    for job_id in jobs:
        assert scheduler.wait_status(job_id, "RUNNING").vm == "vm-a"

    assert agent.terminate() == 0  # SIGTERM, as a VM shutdown does

    row = wait_for(lambda: (r := scheduler.vm("vm-a")) and r["state"] == "STOPPING" and r, 15, what="vm-a STOPPING")
    assert row["jobs"] == [], f"vm-a's STOPPING lists {row['jobs']!r}: Zen takes it for a VM running one job at a time"
    [sent] = agent.said("heartbeat sent", vm_state="STOPPING")
    assert sent.get("jobs") == 0, f"the STOPPING vm-a sent lists {sent.get('jobs')!r} jobs"  # (the message it sent)
    for job_id in jobs:
        assert scheduler.wait_status(job_id, "QUEUED", timeout_s=15).attempt == 2
