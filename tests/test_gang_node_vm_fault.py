"""A gang one of whose VMs was at fault (zen.agent.gpucheck): its node reports PREEMPTED (its GPUs failed their check
after its part ended, or as Zen stopped it), after or before its peer's failure on the broken collectives. The gang's
attempt is lost unspent, neither an attempt nor a retry charged; a node stopped at its share of the disk ends it
FAILED, named, not retried (its rerun would fill it again). Through the functions and Postgres."""
from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from zen.store import repository

AT_FAULT = ("zen: VM vm-2 was at fault as its part stopped: its GPUs failed their check: `nvidia-smi -L` lists 3 of "
            "the VM's 4 GPUs: GPU 0 | GPU 1 | GPU 2")


def _running(functions, zen) -> None:
    functions.submit(job_request("g", nodes=2, max_retries=2, retry_backoff_s=0))
    for vm, ip in (("vm-1", "10.0.0.1"), ("vm-2", "10.0.0.2")):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=ip))
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-1", exit_code=1, message="NCCL error: remote process exited"))
    assert job(zen, "g").status.value == "STOPPING"


def _history(zen) -> list[str]:
    with zen.db.transaction() as session:
        return [r["reason"] or "" for r in repository.job_history(session, "g")]


def test_a_gang_whose_peer_failed_on_a_vm_at_fault_is_rerun_unspent(functions, zen):
    _running(functions, zen)
    functions.heartbeat(heartbeat("g", "PREEMPTED", 3, vm="vm-2", exit_code=143, message=AT_FAULT))
    record, history = job(zen, "g"), _history(zen)
    assert (record.status.value, record.attempt, record.retries, record.max_attempts) == ("QUEUED", 2, 0, 4), history
    assert any(h.startswith("VM vm-2 was at fault as its part stopped: its GPUs failed their check") for h in history)


def test_a_gang_node_stopped_at_its_disk_share_ends_it_failed_named_not_retried(functions, zen):
    _running(functions, zen)
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-2", exit_code=143, over_limit="disk",
                                  message="zen: its directory holds 12 GB, over its share of the disk (10 GB)"))
    record, history = job(zen, "g"), _history(zen)
    assert (record.status.value, record.attempt, record.retries) == ("FAILED", 1, 0), history
    assert history[-1] == "node 1 (vm-2) failed: stopped at its share of the disk (exit code 143)", history
