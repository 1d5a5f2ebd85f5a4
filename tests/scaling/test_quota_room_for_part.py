"""A GPU quota with room for part of what a pool is asked for: Zen asks there for what fits and the rest
elsewhere, and a gang (whose VMs all come from one pool) goes where the whole of it fits. Asked for more than
the quota holds, Compute refuses the rest (QUOTA_EXCEEDED), which strikes the pool: the gang's part that did
boot sat idle, billed, until given back, and was asked there again once the pool's block ran out."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.scaling.test_gpu_quotas import quota_standin
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.adapters.quotas import QuotaReader
from zen.app import Zen
from zen.scaling.manager import ClusterOrchestrator

CLUSTER = "4xa100-40gb"  # 4 GPUs a VM, max_vms_per_region 4; regions: us-central1, us-west1, europe-west4


@pytest.fixture
def one_vm_in_central(config, monkeypatch, tmp_path):
    """us-central1 (the first region) has A100 quota for one of the cluster's VMs; the others for plenty."""
    quotas = {"regions": {"us-central1": {"NVIDIA_A100_GPUS": 4, "PREEMPTIBLE_NVIDIA_A100_GPUS": 4}},
              "all_regions": 1000}
    with quota_standin(config, monkeypatch, tmp_path, quotas, capacity=8) as running:
        yield running


def _asked(config, clients) -> dict[str, int]:
    cluster = config.cluster(CLUSTER)
    return {r: len(MigManager(config.project, r, cluster.mig_name(r), *clients).instances()) for r in cluster.regions}


def _zen(config, db, publisher, clock, clients) -> Zen:
    scaler = ClusterOrchestrator(config, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients),
                                 quotas=QuotaReader(config.project))
    return Zen(config, db, publisher, clock, scaler=scaler)


def test_a_gang_is_asked_for_where_the_quota_holds_all_of_it(one_vm_in_central, config, db, publisher, clock):
    from zen_dev.local.invoke import FunctionsInvoker

    clients = compute_clients_from_env()
    ticker, submitter = _zen(config, db, publisher, clock, clients), _zen(config, db, publisher, clock, clients)
    FunctionsInvoker(ticker).tick()  # reads the quotas; the submission's pass (another instance) goes by memory
    FunctionsInvoker(submitter).submit(job_request("gang", cluster=CLUSTER, nodes=2))
    asked = _asked(config, clients)
    assert asked["us-central1"] == 0, asked  # room for one of its two VMs: not asked there
    assert asked["us-west1"] >= 2, asked
    with db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
    assert not [d for d in decisions if d["action"] == "BLOCK"], decisions  # nothing refused, nothing struck


def test_jobs_are_asked_for_where_the_quota_has_room_and_the_rest_elsewhere(one_vm_in_central, config, db,
                                                                           publisher, clock):
    from zen_dev.local.invoke import FunctionsInvoker

    clients = compute_clients_from_env()
    zen = _zen(config, db, publisher, clock, clients)
    fn = FunctionsInvoker(zen)
    fn.tick()
    for n in range(3):
        fn.submit(job_request(f"job-{n}", cluster=CLUSTER))
    fn.tick()
    asked = _asked(config, clients)
    assert asked["us-central1"] == 1, asked  # what its quota holds
    assert asked["us-west1"] + asked["europe-west4"] >= 2, asked
    with db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
    assert not [d for d in decisions if d["action"] == "BLOCK"], decisions


def test_the_room_read_is_counted_down_by_the_vms_asked_since_and_a_held_job_says_the_quota_holds_it():
    """The tick's read is remembered with the VMs the pool listed then; later passes (any instance) ask only
    for what is left of it, and a job no pool has room for says a GPU quota holds it, not the limits."""
    from dataclasses import replace as replaced

    from tests.scaling.test_planner import LIMITS, at, snap
    from zen.scaling.model import QueuedJob
    from zen.scaling.planner import ZenPlanner

    regions = LIMITS.regions
    one_each = {r: 1 for r in regions}  # every pool has room for one more of the cluster's VMs

    def job(n: int) -> QueuedJob:
        return QueuedJob(f"j{n}", regions, at(0))

    read = ZenPlanner().plan(replaced(snap(0, queued=[job(0)]), quota_room=one_each))
    assert sum(read.add.values()) == 1
    first = next(iter(read.add))
    assert read.memory[first].quota_room == 1 and read.memory[first].quota_listed == 0
    # The next pass (no read of its own): the VM asked is not listed yet, its MIG's target size says so
    after = ZenPlanner().plan(snap(10, queued=[job(0), job(1)], memory=read.memory,
                                   targets={r: read.add.get(r, 0) for r in regions}))
    assert first not in after.add and after.add, after.add
    # Every pool's room taken: the next job waits, and says why
    taken = {r: replaced(m, quota_room=0) for r, m in after.memory.items()}
    held = ZenPlanner().plan(snap(20, queued=[job(2)], memory=taken))
    assert not held.add
    [reason] = [d.reason for d in held.decisions if d.action.value == "HOLD"]
    assert "the last GPU quota read leaves no room for more in" in reason, reason
