"""`zen explain JOB` adds "; GPU quota ... holds POOL back" for the cluster's latest BLOCK decision of each
of the job's pools (zen/cli/queues.py explain_line). It matched the decisions' ``region`` (a pool key:
``us-central1`` for the primary model's pool, ``us-central1/spot`` for another's) against ``job.regions``
(bare regions), so, in a cluster of [standard, spot]:

- a spot-only job was told the standard quota held us-central1 back, while the planner had just asked
  for a spot VM for it in us-central1 (the quota is of VMs the job never uses);
- a spot-only job whose own pool a spot quota blocked was told nothing of that quota.

It matches them against the job's pools now: its regions x the models it accepts.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.messages import job_request
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.adapters.quotas import QuotaReader
from zen.app import Zen
from zen.cli.queues import explain_job
from zen.core.config import load_config
from zen.scaling.manager import ClusterOrchestrator
from zen_dev.local.compute import ComputeStandIn, ManualClock as CloudClock
from zen_dev.local.invoke import FunctionsInvoker

CLUSTER = "4xa100-40gb"


@pytest.fixture
def standard_and_spot(config, tmp_path, monkeypatch):
    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster["provisioning"] = ["standard", "spot"]  # pools us-central1 (standard), us-central1/spot, ...
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    return load_config(path)


def _explained(config, db, publisher, clock, monkeypatch, tmp_path, capsys, empty_quota: str) -> str:
    scenario = {"project": config.project, "seed": 2, "capacity": {"default": 4},
                "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0},
                "gpu_quotas": {"regions": {"us-central1": {empty_quota: 0}}, "all_regions": 100}}
    standin = ComputeStandIn(scenario, clock=CloudClock(), config=config, log_dir=tmp_path).start()
    monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
    try:
        clients = compute_clients_from_env()
        scaler = ClusterOrchestrator(config, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients),
                                     quotas=QuotaReader(config.project))
        fn = FunctionsInvoker(Zen(config, db, publisher, clock, scaler=scaler))
        fn.tick()  # reads the quotas
        fn.submit(job_request("a", cluster=CLUSTER, provisioning="spot"))
        fn.tick()
        capsys.readouterr()
        assert explain_job("a", False, db) == 0
        return capsys.readouterr().out
    finally:
        standin.stop()


def test_a_spot_job_is_not_told_the_standard_quota_holds_its_region_back(standard_and_spot, db, publisher, clock,
                                                                          monkeypatch, tmp_path, capsys):
    why = _explained(standard_and_spot, db, publisher, clock, monkeypatch, tmp_path, capsys, "NVIDIA_A100_GPUS")
    with db.transaction() as session:
        asked = [d for d in session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
                 if d["action"] == "ADD" and d["region"] == "us-central1/spot" and "queued job" in d["reason"]]
    assert asked, "the planner asked for a spot VM for the job in us-central1"
    assert "NVIDIA_A100_GPUS (us-central1) holds us-central1 back" not in why, why


def test_a_spot_job_is_told_the_spot_quota_that_holds_its_pool_back(standard_and_spot, db, publisher, clock,
                                                                     monkeypatch, tmp_path, capsys):
    why = _explained(standard_and_spot, db, publisher, clock, monkeypatch, tmp_path, capsys,
                     "PREEMPTIBLE_NVIDIA_A100_GPUS")
    with db.transaction() as session:
        blocks = [d for d in session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
                  if d["action"] == "BLOCK" and d["region"] == "us-central1/spot"]
    assert blocks and blocks[0]["reason"].startswith("GPU quota PREEMPTIBLE_NVIDIA_A100_GPUS (us-central1)")
    assert "GPU quota PREEMPTIBLE_NVIDIA_A100_GPUS (us-central1)" in why, why
