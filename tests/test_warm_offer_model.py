"""A start offered first to warm VMs (zen.core.routing.first_route: their cache holds the job's inputs) goes only to
those of a provisioning model the job accepts. Offered to a spot VM for a job that accepts standard VMs only, its
claim was refused ("is a spot VM, and the job accepts standard VMs only") and the start reached the job's regions
only after that round trip (or the tick's widening, had the VM dropped the offer), the VM counted as offered
meanwhile."""

from __future__ import annotations

import json

from tests.messages import job_request
from tests.test_routing import DATA, history, vm_heartbeat
from zen.core.config import ZenConfig


def test_a_warm_vm_of_a_model_the_job_does_not_accept_is_not_offered_its_start(config, db, publisher, clock, db_url,
                                                                              monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    raw["data"] = {"bucket_locations": {"eu-data": "europe-west4"}, "route_min_gb": 10}
    raw["deadlines"]["data_wait_s"] = 30
    for cluster in raw["clusters"]:
        if cluster["name"] == "4xa100-40gb":
            cluster["provisioning"] = ["standard", "spot"]
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions = FunctionsInvoker(zen)
    cluster = zen.config.cluster("4xa100-40gb")
    spot_vm = f"{cluster.mig_name('us-west1', 'spot')}-ab12"
    functions.heartbeat(vm_heartbeat(spot_vm, "us-west1", 1, cached_inputs=["gs://eu-data/shards/"]))

    functions.submit(job_request("std", inputs=DATA, provisioning="standard"))
    first = history(zen, "std")[-1][2]
    assert spot_vm not in first and "start sent to europe-west4 first, where its data is" in first, first

    functions.submit(job_request("any", inputs=DATA))  # a job that accepts spot is offered it
    assert f"start offered to VM {spot_vm}" in history(zen, "any")[-1][2]
