"""A gang whose nodes ran as different provisioning models, one of them with no price anywhere (no catalog or
snapshot price for the machine type, an override for the standard model only), is unpriced when it ends:
``insert_attempt_usage`` keeps ``usd_per_hour`` NULL ("unpriced where any VM's model is",
zen.core.prices.AttemptPrice) and the row's model is rank 0's. ``zen usage`` re-priced that NULL as a row
from before migration 0032: today's price of rank 0's model for the whole gang (x vm_share 2), the spot node
billed at the standard price, no ``unpriced`` note; and an attempt that ended while its cluster was removed
was priced once the cluster was configured again. Both are unpriced now, never a guess (only rows from before
prices were kept are priced at today's)."""

from __future__ import annotations

import json

import pytest

from tests.messages import heartbeat, job_request
from zen.cli import main as cli
from zen.core.config import ZenConfig

CLUSTER = "4xa100-40gb"
STANDARD_VM = "zen-4xa100-40gb-us-central1-ab12"  # the primary (standard) pool's MIG
SPOT_VM = "zen-4xa100-40gb-us-central1-spot-cd34"  # the spot pool's MIG: <primary MIG>-spot


def _config(config) -> ZenConfig:
    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:  # a machine type neither the snapshot nor the catalog prices
            cluster.update(machine_type="n1-standard-32", gpu_type="nvidia-tesla-v100", provisioning=["standard", "spot"])
    raw["pricing"] = {"overrides": {"n1-standard-32": {"us-central1": {"standard": 10.0}}}}  # spot: no price
    return ZenConfig.model_validate(raw)


@pytest.fixture
def priced(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    cfg = _config(config)
    zen = Zen(cfg, db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.setattr("zen.core.config.load_config", lambda *a, **k: cfg)  # zen usage reads the same configuration
    return zen, FunctionsInvoker(zen)


def _usage(capsys) -> dict:
    assert cli.main(["usage", "--since", "2025-12-01", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_one_vm_attempt_on_an_unpriced_model_is_unpriced(priced, clock, capsys):
    zen, functions = priced
    functions.submit(job_request("solo"))
    functions.heartbeat(heartbeat("solo", "CLAIMED", 1, vm=SPOT_VM))
    functions.heartbeat(heartbeat("solo", "RUNNING", 2, vm=SPOT_VM))
    clock.advance(3600)
    functions.heartbeat(heartbeat("solo", "SUCCEEDED", 3, vm=SPOT_VM, exit_code=0))
    report = _usage(capsys)
    assert report["total"]["usd"] is None and report["unpriced"]  # as documented: unpriced, never a guess


def run_gang_for_an_hour(functions, clock, job_id: str) -> None:
    """Multi-node job ``job_id`` (submitted) run an hour on one standard and one spot VM, and SUCCEEDED."""
    for vm, ip in ((STANDARD_VM, "10.0.0.1"), (SPOT_VM, "10.0.0.2")):
        functions.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=vm, ip=ip))
    for vm in (STANDARD_VM, SPOT_VM):
        functions.heartbeat(heartbeat(job_id, "RUNNING", 2, vm=vm))
    clock.advance(3600)
    for vm in (STANDARD_VM, SPOT_VM):
        functions.heartbeat(heartbeat(job_id, "SUCCEEDED", 3, vm=vm, exit_code=0))


def test_a_gang_with_a_node_on_an_unpriced_model_is_unpriced_not_billed_at_rank_0s_price(priced, clock, capsys):
    zen, functions = priced
    functions.submit(job_request("g", nodes=2))
    run_gang_for_an_hour(functions, clock, "g")
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT model, usd_per_hour, vm_share FROM attempt_usage WHERE job_id = 'g'")
    assert (row["model"], row["usd_per_hour"], row["vm_share"]) == ("spot+standard", None, 2.0)  # unpriced as it ended

    report = _usage(capsys)
    # Fails: usd is 20.0 (both VM-hours at the standard override, the spot node's too) and unpriced is [].
    assert (report["total"]["usd"], bool(report["unpriced"])) == (None, True), report


def test_an_attempt_that_ended_while_its_cluster_was_removed_stays_unpriced_once_it_is_back(
        functions, zen, config, db, publisher, clock, capsys):
    """accounting.md: an attempt that ends after its cluster was removed "is recorded without a machine type or
    price, and the groups holding it are unpriced in zen usage". Its row (model and price NULL) is re-priced as a
    row from before migration 0032 as soon as a cluster of that name is configured again (a removal rolled back):
    today's price, the model guessed from the VM's name. Same cause as above."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm=SPOT_VM))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm=SPOT_VM))
    clock.advance(3600)
    raw = json.loads(config.model_dump_json())
    raw["clusters"] = [c for c in raw["clusters"] if c["name"] != CLUSTER]
    without = FunctionsInvoker(Zen(ZenConfig.model_validate(raw), db, publisher, clock))  # the cluster removed
    without.heartbeat(heartbeat("job-1", "SUCCEEDED", 3, vm=SPOT_VM, exit_code=0))
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT machine_type, model, usd_per_hour FROM attempt_usage WHERE job_id = 'job-1'")
    assert (row["machine_type"], row["model"], row["usd_per_hour"]) == (None, None, None)  # unpriced as it ended
    report = _usage(capsys)  # zen usage under the configuration with the cluster back
    # Fails: usd is 14.69 (today's standard price: the spot VM's name names no pool of today's standard-only cluster).
    assert (report["total"]["usd"], bool(report["unpriced"])) == (None, True), report
