"""`zen stats` shows "the operator's figures (the dashboard's metrics)" under their names; its
``zen_cluster_stocked_out`` counted only the blocked rows whose key is a bare region (the primary model's
pools) against the number of regions, while the tick's metric (zen.telemetry, the dashboard) counts every
pool of the cluster (regions x models). In a cluster of [spot, standard] whose three spot pools are stocked
out while its standard pools are open, `zen stats` said the cluster was stocked out (1) when it is not: its
standard VMs can still be asked for, and the dashboard says 0."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import yaml

from tests.messages import job_request
from zen.cli.main import main
from zen.core.config import DEFAULT_CONFIG_PATH
from zen.store import fleet

CLUSTER = "4xa100-40gb"


def test_stats_does_not_call_a_cluster_stocked_out_while_its_other_model_pools_are_open(
        functions, db, db_url, monkeypatch, capsys, tmp_path):
    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    [cluster] = [c for c in raw["clusters"] if c["name"] == CLUSTER]
    cluster["provisioning"] = ["spot", "standard"]  # pools: us-central1 (spot), us-central1/standard, ...
    (path := tmp_path / "zen.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)

    functions.submit(job_request("waits", cluster=CLUSTER))  # a QUEUED job of the cluster
    until = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    with db.transaction() as session:  # every spot pool stocked out; the standard pools open
        for region in cluster["regions"]:
            fleet.save_scaling_memory(session, CLUSTER, region, json.dumps({"blocked_until": until, "strikes": 1}),
                                      datetime.now(timezone.utc))
    capsys.readouterr()

    assert main(["stats", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert len(figures["zen_region_blocked"]) == 3  # the three spot pools
    [row] = [r for r in figures["zen_cluster_stocked_out"] if r["cluster"] == CLUSTER]
    pools = len(cluster["regions"]) * len(cluster["provisioning"])
    # The dashboard's rule (zen.telemetry): blocked pools == the cluster's pools, while jobs wait.
    assert row["stocked_out"] == int(3 == pools) == 0, row
