"""Through the tick (the real scaler against the Compute stand-in, Postgres): a job reading 2 TB from a europe-west4
bucket is asked a VM in europe-west4 at $15.10/h, not in us-central1 at $14.69/h, where reading its data would cost
$160 (2,000 GB x data.egress_usd_per_gb.other, as `zen explain` prices it), and the ADD's reason names the egress
compared. Its start is not narrowed to its data's region (deadlines.data_wait_s 0): the planner's ranking alone
decides, as it does for every job once its start is widened."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import yaml

from tests.messages import job_request
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.app import Zen
from zen.core.config import load_config
from zen.core.prices import Price, PriceTable
from zen.scaling.manager import ClusterOrchestrator
from zen_dev.local.compute import ComputeStandIn, ManualClock as CloudClock
from zen_dev.local.invoke import FunctionsInvoker

CLUSTER = "4xa100-40gb"
AT = datetime(2026, 12, 1, tzinfo=timezone.utc)
PRICES = PriceTable({("a2-highgpu-4g", "us-central1", "standard"): Price(14.69, "catalog", AT),
                     ("a2-highgpu-4g", "us-west1", "standard"): Price(14.69, "catalog", AT),
                     ("a2-highgpu-4g", "europe-west4", "standard"): Price(15.10, "catalog", AT)})


def test_the_tick_asks_near_two_terabytes_of_input_and_names_the_egress(config, db, publisher, clock, monkeypatch,
                                                                          tmp_path):
    raw = json.loads(config.model_dump_json())
    raw["data"] = {"bucket_locations": {"eu-data": "europe-west4"}}
    raw["deadlines"]["data_wait_s"] = 0
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    located = load_config(path)
    scenario = {"project": located.project, "seed": 2, "capacity": {"default": 4},
                "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0}}
    standin = ComputeStandIn(scenario, clock=CloudClock(), config=located, log_dir=tmp_path).start()
    monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
    try:
        clients = compute_clients_from_env()
        scaler = ClusterOrchestrator(located, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients),
                                     prices=lambda: PRICES)
        fn = FunctionsInvoker(Zen(located, db, publisher, clock, scaler=scaler))
        fn.submit(job_request("data", cluster=CLUSTER, inputs=[{"uri": "gs://eu-data/shards/", "size_gb": 2000}]))
        fn.tick()
        with db.transaction() as session:
            asked = {d["region"]: d["reason"] for d in session.run("recent_scaling_decisions", cluster=CLUSTER,
                                                                    limit=50)
                     if d["action"] == "ADD" and "queued job" in d["reason"]}
    finally:
        standin.stop()
    assert list(asked) == ["europe-west4"], asked
    assert "$15.10/h (standard) + $0.00 egress" in asked["europe-west4"], asked
    assert "us-central1 $14.69/h (standard) + $160.00 egress" in asked["europe-west4"], asked
