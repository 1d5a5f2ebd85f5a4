"""A pool Compute refused for a GPU quota it names (QUOTA_EXCEEDED naming GPUS_ALL_REGIONS) is blocked, backing off
strike by strike. A tick's quota read that could not read the quotas (no permission to read them, say: every read
fails, and holds nothing back) read nothing, and lifted that block every tick: the pool was struck again by the same
refusal, its strikes counting up and its backoff never taking effect. Such a read lifts no block."""

from __future__ import annotations

from tests.messages import job_request
from tests.scaling.test_gpu_quotas import quota_standin
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.adapters.quotas import QuotaReader
from zen.app import Zen
from zen.scaling.manager import ClusterOrchestrator

CLUSTER = "4xa100-40gb"  # 4 GPUs a VM
CENTRAL = "us-central1"


def _decisions(db) -> list[dict]:
    with db.transaction() as tx:
        return list(reversed(tx.run("recent_scaling_decisions", cluster=CLUSTER, limit=200)))


def _ticks(config, db, publisher, clock, monkeypatch, tmp_path, project: str) -> list[dict]:
    from zen_dev.local.invoke import FunctionsInvoker

    quotas = {"regions": {}, "all_regions": 0}  # GPUS_ALL_REGIONS holds none of the cluster's VMs
    with quota_standin(config, monkeypatch, tmp_path, quotas, capacity=8) as standin:
        clients = compute_clients_from_env()
        scaler = ClusterOrchestrator(config, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients),
                                     quotas=QuotaReader(project))
        fn = FunctionsInvoker(Zen(config, db, publisher, clock, scaler=scaler))
        fn.tick()
        fn.submit(job_request("a", cluster=CLUSTER, regions=[CENTRAL]))
        for _ in range(6):  # six minutes: within the first block (180s) and the second (360s)
            clock.advance(60)
            standin.advance(60)
            fn.tick()
    return [d for d in _decisions(db) if d["region"] == CENTRAL and d["action"] in ("BLOCK", "UNBLOCK")]


def test_a_refusal_block_is_not_lifted_by_a_quota_read_that_read_nothing(config, db, publisher, clock, monkeypatch,
                                                                          tmp_path):
    """Six ticks of a minute, each quota read failing: the block laid by Compute's refusal (180s) runs its course."""
    seen = _ticks(config, db, publisher, clock, monkeypatch, tmp_path, "no-such-project")  # every quota read fails
    said = [f"{d['action']}: {d['reason']}" for d in seen]
    assert [d for d in said if d.startswith("UNBLOCK")] == [], said
    assert len([d for d in said if d.startswith("BLOCK")]) == 1, said
