"""The tick reads the quotas afresh: a kept answer (QuotaReader keeps each a minute, and the scheduler ticks every
minute, the local stack every 2 s) was remembered with the VMs the pool listed then (RegionMemory.quota_listed), so
a VM made after that answer was read was counted neither in its usage nor among those asked beyond the listed ones:
quotas.left gave its room a second time, and the pool was asked for a VM the quota had no room for (QUOTA_EXCEEDED
struck it). The reader's own cache (ttl_s) no longer matters to the tick."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.scaling.test_gpu_quotas import quota_standin
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.adapters.quotas import QuotaReader
from zen.app import Zen
from zen.scaling.manager import ClusterOrchestrator

CLUSTER = "4xa100-40gb"  # 4 GPUs a VM, max_vms_per_region 4; regions: us-central1, us-west1, europe-west4
CENTRAL = "us-central1"


@pytest.fixture
def standard(config):
    """The cluster's provisioning named (standard), so the Compute stand-in's MIGs are standard ones too (one
    that lists none is preemptible there) and count against the quota Zen reads for the pool."""
    clusters = [c.model_copy(update={"provisioning": ["standard"]}) if c.name == CLUSTER else c for c in config.clusters]
    return config.model_copy(update={"clusters": clusters})


@pytest.fixture
def one_vm_in_central(standard, monkeypatch, tmp_path):
    """us-central1 has A100 quota for one of the cluster's VMs; the other regions plenty."""
    quotas = {"regions": {CENTRAL: {"NVIDIA_A100_GPUS": 4}}, "all_regions": 1000}
    with quota_standin(standard, monkeypatch, tmp_path, quotas, capacity=8) as running:
        yield running  # its clock advanced by the test (advance)


@pytest.mark.parametrize("ttl_s", [60.0, 0.0])  # production's reader; a fresh read at every tick
def test_a_kept_quota_answer_is_not_recorded_with_vms_listed_after_it(one_vm_in_central, standard, db, publisher,
                                                                      clock, ttl_s):
    from zen_dev.local.invoke import FunctionsInvoker

    config, clients = standard, compute_clients_from_env()
    scaler = ClusterOrchestrator(config, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients),
                                 quotas=QuotaReader(config.project, ttl_s=ttl_s))
    fn = FunctionsInvoker(Zen(config, db, publisher, clock, scaler=scaler))
    fn.tick()  # reads: room for 1 in us-central1, none listed
    fn.submit(job_request("first", cluster=CLUSTER, regions=[CENTRAL]))
    one_vm_in_central.advance(5)  # Compute creates it: it holds its GPUs
    assert QuotaReader(config.project).region(CENTRAL)["NVIDIA_A100_GPUS"].usage == 4
    fn.tick()  # with ttl_s 60: the reader's kept answer (usage 0), recorded with that VM listed
    fn.submit(job_request("second", cluster=CLUSTER, regions=[CENTRAL]))
    fn.tick()
    asked = MigManager(config.project, CENTRAL, config.cluster(CLUSTER).mig_name(CENTRAL), *clients).target_size()
    with db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
    refused = [d["reason"] for d in decisions if d["action"] == "BLOCK" and "quota error" in d["reason"]]
    # The second job waits for the quota (a fresh read strikes the pool without asking: "GPU quota ... holds
    # us-central1 back"); nothing is asked that Compute refuses.
    assert asked == 1 and not refused, (asked, refused)
