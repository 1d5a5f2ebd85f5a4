"""[spot, standard] -> [standard]: the primary MIG (``zen-<cluster>-<region>``) keeps its name and its VMs booted as
spot stay spot. A start offered first to warm VMs (zen.core.routing.first_route) goes to those of a model the job
accepts as a scaling pass recorded it (``mig_instances.model``, as claims read it: zen.jobs.claims), not as the VM's
name tells under the cluster's models now (standard): offered to such a spot VM alone, a job accepting standard VMs
only had its claim refused, its start narrowed to that VM's region and held there until ``data_wait_s`` ran out."""

from __future__ import annotations

import json

from tests.messages import job_request
from tests.test_claims_by_recorded_model import CLUSTER, SPOT_VM
from tests.test_routing import DATA, history, vm_heartbeat
from zen.core.config import ZenConfig
from zen.store import fleet


def _zen(config, db, publisher, clock, models):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    raw["data"] = {"bucket_locations": {"eu-data": "europe-west4"}, "route_min_gb": 10}
    raw["deadlines"]["data_wait_s"] = 30
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster["provisioning"] = models
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    return zen, FunctionsInvoker(zen)


def test_a_warm_spot_vm_of_the_primary_mig_is_not_offered_a_standard_only_start_after_spot_left_its_cluster(
        config, db, publisher, clock, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    before, _ = _zen(config, db, publisher, clock, ["spot", "standard"])
    with before.db.transaction() as session:  # a scaling pass lists the primary MIG's VM, booted as spot
        fleet.see_instances(session, CLUSTER, "us-central1", [SPOT_VM], clock(), model="spot")
    zen, functions = _zen(config, db, publisher, clock, ["standard"])  # spot removed from the cluster
    functions.heartbeat(vm_heartbeat(SPOT_VM, "us-central1", 1, cached_inputs=["gs://eu-data/shards/"]))

    functions.submit(job_request("std", cluster=CLUSTER, inputs=DATA, provisioning="standard"))
    first = history(zen, "std")[-1][2]
    assert SPOT_VM not in first and "start sent to europe-west4 first, where its data is" in first, first

    functions.submit(job_request("any", cluster=CLUSTER, inputs=DATA))  # a job that accepts spot is offered it
    assert f"start offered to VM {SPOT_VM}" in history(zen, "any")[-1][2]
