"""``zen stats``' attempt_usd is "per cluster, region and provisioning model": a multi-node attempt whose nodes ran as
different models (a spot and a standard VM of one region: gangs claim by region, not model) is filed under their
models joined, spot+standard, with both nodes' VM-hours and dollars. Filed under rank 0's model, the standard node's
VM-hour and dollars read as spot's."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from tests.messages import heartbeat, job_request
from zen.cli import main as cli
from zen.core.config import ZenConfig

CLUSTER = "4xa100-40gb"
SPOT_VM = "zen-4xa100-40gb-us-central1-ab12"  # the primary pool's MIG: the cluster's first model, spot
STD_VM = "zen-4xa100-40gb-us-central1-std-cd34"  # the standard pool's MIG
SPOT, STANDARD = 5.17342, 14.69354  # the snapshot's a2-highgpu-4g in us-central1 per VM-hour


@pytest.fixture
def spot_first(config, db, publisher, db_url, monkeypatch):
    from zen.app import Zen
    from zen.core.clock import ManualClock
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster.update(provisioning=["spot", "standard"])
    cfg = ZenConfig.model_validate(raw)
    clock = ManualClock(datetime.now(timezone.utc) - timedelta(hours=2))  # within zen stats' window
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.setattr("zen.core.config.load_config", lambda *a, **k: cfg)
    return FunctionsInvoker(Zen(cfg, db, publisher, clock)), clock


def test_a_gangs_standard_node_is_not_counted_as_spot(spot_first, capsys):
    functions, clock = spot_first
    functions.submit(job_request("g", nodes=2))
    for vm in (SPOT_VM, STD_VM):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip="10.0.0.1" if vm == SPOT_VM else "10.0.0.2"))
    for vm in (SPOT_VM, STD_VM):
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))
    clock.advance(3600)
    for vm in (SPOT_VM, STD_VM):
        functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm=vm, exit_code=0))

    assert cli.main(["stats", "--window", "600", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["attempt_usd"]
    by_model = {r["model"]: (r["vm_hours"], r["usd"]) for r in rows}
    assert sum(r["usd"] for r in rows) == round(SPOT + STANDARD, 2)  # the total is right
    # one VM-hour each, at each model's own price, under what ran them (which node ran as which is not kept)
    assert by_model == {"spot+standard": (2.0, round(SPOT + STANDARD, 2))}, rows
