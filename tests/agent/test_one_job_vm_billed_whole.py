"""A VM booted before its cluster's ``max_jobs_per_vm`` was raised runs one job at a time (its template's
``zen-max-jobs-per-vm`` 1; here ``ZEN_AGENT_MAX_JOBS_PER_VM=1``; docs/reference/configuration.md, "Several jobs
per VM"). A 4-GPU job submitted after the raise lands on it and the agent gives it every GPU: it is billed the VM
whole, as docs/explanations/accounting.md says ("the cluster's gpu_count when a VM runs one job at a time"). It was
billed 4 GPUs and half the VM (``job.gpus``, set at submission from the configuration)."""

from __future__ import annotations

from tests.agent.helpers import job_command
from tests.agent.test_jobs_per_vm_integration import SHARED, config, submit_four_gpus  # noqa: F401
from zen.store import usage


def test_a_four_gpu_job_alone_on_a_one_job_vm_sees_what_it_is_billed_for(scheduler, agents):
    submit_four_gpus(scheduler, "old-vm", job_command("--print-env", "CUDA_VISIBLE_DEVICES", "--print-env",
                                                      "ZEN_GPU_IDS", "--sleep", "1"))
    agents.start("vm-a", ZEN_CLUSTER=SHARED, ZEN_AGENT_MAX_JOBS_PER_VM="1")
    job = scheduler.wait_status("old-vm", "SUCCEEDED")
    with scheduler.db.transaction() as session:
        row = usage.attempts_of_job(session, "old-vm")[0]
    saw_all = "CUDA_VISIBLE_DEVICES=\n" in job.message
    billed = (row["gpus"], float(row["vm_share"]))
    assert saw_all and billed == (8, 1.0), (
        f"the job saw every GPU of the VM (message {job.message!r}) and held it alone, billed {billed} (GPUs, VM share)")
