"""Several jobs per VM (issue 15, a cluster's ``max_jobs_per_vm``), the scheduler's side: a job holds
the GPUs it asks for, a claim from a VM is accepted only while the VM's jobs and GPUs fit (else
RELEASE with the reason, and the start message goes out again), VM heartbeats may name every job,
and usage charges each attempt its own GPUs and its share of the VM. A cluster left at the default
(1) behaves as it always did."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.messages import heartbeat, job_request
from zen.core.config import ClusterConfig, ZenConfig
from zen.store import repository, usage

SHARED = "8xa100-40gb"  # 8 GPUs per VM, two jobs at once in these tests


def by_type(job_id: str, gpus: int, **fields) -> dict:
    """A request by GPU shape: with the 4-GPU cluster gone, every A100 job lands on 8xa100-40gb."""
    return job_request(job_id, cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=gpus, **fields)


def sharing(config: ZenConfig, max_jobs: int = 2) -> ZenConfig:
    raw = json.loads(config.model_dump_json())
    raw["clusters"] = [c for c in raw["clusters"] if c["name"] != "4xa100-40gb"]
    for cluster in raw["clusters"]:
        if cluster["name"] == SHARED:
            cluster["max_jobs_per_vm"] = max_jobs
    return ZenConfig.model_validate(raw)


@pytest.fixture
def shared(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(sharing(config), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def controls(publisher) -> list[tuple[str, str, str, str]]:
    return [(c["vm"], c["job_id"], c["action"], c["reason"])
            for c in (json.loads(m.data) for m in publisher.on("zen-vm-control"))]


def test_max_jobs_per_vm_defaults_to_one_and_cannot_exceed_the_vms_gpus():
    base = dict(name="c", gpu_type="t", gpu_count=8, regions=["r"], max_vms_per_region=1, max_vms=1)
    assert ClusterConfig(**base).max_jobs_per_vm == 1
    assert ClusterConfig(**base).gpus_held(4) == 8  # one job at a time: it holds the whole VM
    assert ClusterConfig(**base, max_jobs_per_vm=2).gpus_held(4) == 4
    assert ClusterConfig(**base, max_jobs_per_vm=2).gpus_held(None) == 8  # it named the cluster
    with pytest.raises(ValueError, match=r"max_jobs_per_vm \(9\) is above gpu_count \(8\)"):
        ClusterConfig(**base, max_jobs_per_vm=9)


def test_a_claim_is_accepted_while_the_vms_jobs_and_gpus_fit_and_released_with_the_reason_otherwise(
        shared, publisher):
    zen, functions = shared
    functions.submit(by_type("four-a", 4))
    functions.submit(by_type("four-b", 4))
    functions.submit(by_type("four-c", 4))
    functions.submit(job_request("whole", cluster=SHARED))  # named the cluster: the whole VM
    starts = {json.loads(m.data)["job_id"]: json.loads(m.data) for m in publisher.on("zen-job-start")}
    assert starts["four-a"]["gpus"] == 4 and "gpus" not in starts["whole"]
    assert (job(zen, "four-a").gpus, job(zen, "whole").gpus) == (4, 8)

    functions.heartbeat(heartbeat("four-a", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("whole", "CLAIMED", 1, vm="vm-a"))  # 4 of 8 GPUs free: no
    functions.heartbeat(heartbeat("four-b", "CLAIMED", 1, vm="vm-a"))  # fits beside four-a
    functions.heartbeat(heartbeat("four-c", "CLAIMED", 1, vm="vm-a"))  # two jobs already
    functions.heartbeat(heartbeat("four-c", "CLAIMED", 1, vm="vm-b"))  # an empty VM takes it

    assert controls(publisher) == [
        ("vm-a", "four-a", "CONFIRM", "claim won"),
        ("vm-a", "whole", "RELEASE", "VM vm-a has 4 of its 8 GPUs free; the job needs 8"),
        ("vm-a", "four-b", "CONFIRM", "claim won"),
        ("vm-a", "four-c", "RELEASE",
         f"VM vm-a already runs 2 jobs, the most cluster {SHARED} allows (max_jobs_per_vm 2)"),
        ("vm-b", "four-c", "CONFIRM", "claim won"),
    ]
    assert [(job(zen, j).status.value, job(zen, j).vm) for j in ("four-a", "four-b", "four-c", "whole")] == [
        ("ASSIGNED", "vm-a"), ("ASSIGNED", "vm-a"), ("ASSIGNED", "vm-b"), ("QUEUED", None)]
    # The refused job's start message went out again, for a VM with room.
    assert [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-start")].count("whole") == 2

    # Once four-a ends (and four-b too), vm-a has room for the whole-VM job.
    # (Each claim a new one, of a later seq: a refused claim delivered again is a late copy, and wins nothing.)
    functions.heartbeat(heartbeat("four-a", "SUCCEEDED", 2, vm="vm-a", exit_code=0))
    functions.heartbeat(heartbeat("whole", "CLAIMED", 3, vm="vm-a"))
    assert job(zen, "whole").status.value == "QUEUED"
    functions.heartbeat(heartbeat("four-b", "SUCCEEDED", 2, vm="vm-a", exit_code=0))
    functions.heartbeat(heartbeat("whole", "CLAIMED", 4, vm="vm-a"))
    assert (job(zen, "whole").status.value, job(zen, "whole").vm) == ("ASSIGNED", "vm-a")


def test_with_one_job_per_vm_a_claim_racing_the_last_jobs_end_report_is_accepted_as_before(functions, zen,
                                                                                           publisher):
    functions.submit(job_request("first"))
    functions.submit(job_request("next"))
    functions.heartbeat(heartbeat("first", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("first", "RUNNING", 2, vm="vm-a"))
    # The agent ended "first" and claimed "next"; the claim arrives before the end report.
    functions.heartbeat(heartbeat("next", "CLAIMED", 1, vm="vm-a"))

    assert [(vm, j, action) for vm, j, action, _ in controls(publisher)] == [
        ("vm-a", "first", "CONFIRM"), ("vm-a", "next", "CONFIRM")]
    assert job(zen, "next").status.value == "ASSIGNED" and job(zen, "next").gpus == 4


def test_a_vm_heartbeat_may_name_every_job_it_holds_and_one_naming_a_single_job_is_still_valid(shared):
    zen, functions = shared
    beat = {"kind": "vm", "vm": "vm-a", "cluster": SHARED, "region": "us-central1", "zone": "us-central1-a",
            "state": "BUSY", "sent_at": "2026-01-01T00:00:00Z", "job_id": "j1", "attempt": 1}
    functions.heartbeat({**beat, "seq": 1})
    with zen.db.transaction() as session:
        [row] = repository.list_vms(session)
    assert (row["job_id"], row["jobs"]) == ("j1", None)

    functions.heartbeat({**beat, "seq": 2, "jobs": [{"job_id": "j1", "attempt": 1}, {"job_id": "j2", "attempt": 3}]})
    functions.heartbeat({**beat, "seq": 3, "jobs": [{"job_id": "j1", "attempt": "one"}]})  # refused, acked
    with zen.db.transaction() as session:
        [row] = repository.list_vms(session)
        [rejected] = repository.list_rejections(session)
    assert row["job_id"] == "j1" and row["jobs"] == [{"job_id": "j1", "attempt": 1}, {"job_id": "j2", "attempt": 3}]
    assert row["last_seq"] == 2 and "jobs.0.attempt" in rejected["reason"]


def test_two_attempts_sharing_a_vm_count_their_own_gpus_and_half_the_vm_each(shared, clock):
    zen, functions = shared
    functions.submit(by_type("half-a", 4))
    functions.submit(by_type("half-b", 4))
    functions.submit(job_request("alone", cluster=SHARED))
    for job_id, vm in (("half-a", "vm-a"), ("half-b", "vm-a"), ("alone", "vm-b")):
        functions.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=vm))
    clock.advance(3600)
    for job_id, vm in (("half-a", "vm-a"), ("half-b", "vm-a"), ("alone", "vm-b")):
        functions.heartbeat(heartbeat(job_id, "SUCCEEDED", 2, vm=vm, exit_code=0))

    with zen.db.transaction() as session:
        rows = {j: usage.attempts_of_job(session, j)[0] for j in ("half-a", "half-b", "alone")}
        [total] = usage.run(session, "usage_by", by="total", since=clock() - timedelta(days=1))
    assert {j: (r["gpus"], r["vm_share"], r["gpu_seconds"]) for j, r in rows.items()} == {
        "half-a": (4, 0.5, 4 * 3600.0), "half-b": (4, 0.5, 4 * 3600.0), "alone": (8, 1.0, 8 * 3600.0)}
    # Two VMs for an hour: vm-a's hour split between its two jobs, vm-b's held whole.
    assert float(total["vm_seconds"]) == 2 * 3600.0 and float(total["gpu_seconds"]) == 16 * 3600.0


def test_a_queue_counts_the_gpus_a_job_holds_so_two_four_gpu_jobs_fit_an_eight_gpu_quota(config, db, publisher,
                                                                                         clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(sharing(config).model_dump_json())
    raw["queues"] = [{"name": "default", "quota": {SHARED: 8}}]
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions = FunctionsInvoker(zen)
    for job_id in ("q-1", "q-2", "q-3"):
        functions.submit(by_type(job_id, 4))
        clock.advance(1)

    assert [job(zen, j).status.value for j in ("q-1", "q-2", "q-3")] == ["QUEUED", "QUEUED", "PENDING"]
    assert [job(zen, j).gpus for j in ("q-1", "q-2", "q-3")] == [4, 4, 4]
