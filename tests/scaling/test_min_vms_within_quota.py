"""min_vms is not asked for in a pool the tick's own GPU quota read just found no room in, as a queued job's VM is
not (``quotas.left``): asked there, Compute refused it (QUOTA_EXCEEDED), the pool was struck, and the warm VM came a
tick later elsewhere (``quota_short`` strikes a pool only when jobs are queued)."""

from __future__ import annotations

from tests.scaling.test_gpu_quotas import CLUSTER, NO_A100_IN_CENTRAL, quota_standin
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.adapters.quotas import QuotaReader
from zen.scaling.manager import ClusterOrchestrator


def test_min_vms_is_not_asked_where_the_quota_read_leaves_no_room(config, db, clock, monkeypatch, tmp_path):
    config = config.model_copy(update={"clusters": [
        c.model_copy(update={"min_vms": 1}) if c.name == CLUSTER else c for c in config.clusters]})
    with quota_standin(config, monkeypatch, tmp_path, NO_A100_IN_CENTRAL):  # us-central1: 0 A100 quota
        clients = compute_clients_from_env()
        scaler = ClusterOrchestrator(config, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients),
                                     quotas=QuotaReader(config.project))
        report = scaler.tick()[CLUSTER]
        assert "us-central1" not in report.added, (
            report.added, [(d.action.value, d.region, d.reason) for d in report.decisions])
        assert sum(report.added.values()) == 1  # the warm VM asked where it fits (us-west1)
