"""docs/how-to/operate.md's runbook for "every pool of a cluster is stocked out while jobs wait" says: add regions
to the cluster. A queued job keeps the regions its submission chose (its request named none: every region of its
cluster then), so the jobs that raised the alert were never asked for, offered to, nor let claim a VM in the
region added for them: a VM there that pulled another job's start and then claimed theirs was refused ("region
... is not allowed for this job"), and they waited for the stocked-out regions as before. The tick widens a
queued job to the regions its request allows now, as it narrows one to them when a region goes."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from zen.app import Zen
from zen.store import repository
from zen_dev.local.invoke import FunctionsInvoker

C = "4xa100-40gb"  # regions us-central1, us-west1, europe-west4 in the default configuration
ADDED = "europe-west4"


def _without_added(config):
    return config.model_copy(update={"clusters": [
        c.model_copy(update={"regions": [r for r in c.regions if r != ADDED]}) if c.name == C else c
        for c in config.clusters]})


def _job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def test_a_region_added_to_the_cluster_takes_the_jobs_queued_before(config, db, publisher, clock):
    FunctionsInvoker(Zen(_without_added(config), db, publisher, clock)).submit(job_request("waits"))
    FunctionsInvoker(Zen(_without_added(config), db, publisher, clock)).submit(
        job_request("pinned", regions=["us-west1"]))
    zen = Zen(config, db, publisher, clock)  # the operator adds europe-west4 to the cluster
    functions = FunctionsInvoker(zen)
    functions.tick()
    assert ADDED in _job(zen, "waits").regions  # demand there for the scaling pass that follows
    assert _job(zen, "pinned").regions == ["us-west1"]  # its request named its regions: it keeps them
    starts = [m for m in publisher.on("zen-job-start") if json.loads(m.data)["job_id"] == "waits"]
    assert starts[-1].attributes.get(f"allow_{ADDED.replace('-', '_')}") == "1" or \
        starts[-1].attributes.get("allow_any") == "1", starts[-1].attributes  # its start reaches europe-west4's VMs
    functions.heartbeat(heartbeat("waits", "CLAIMED", 1, vm=f"zen-{C}-{ADDED}-abcd", region=ADDED,
                                  zone=f"{ADDED}-a"))
    assert _job(zen, "waits").status.value == "ASSIGNED"


def test_the_tick_asks_for_a_vm_in_the_region_added_for_jobs_its_other_regions_could_not_start(
        config, db, publisher, clock, monkeypatch, tmp_path):
    from tests.scaling.test_scaling_integration import build_stack
    from zen.adapters.compute import MigManager, compute_clients_from_env
    from zen.scaling.manager import ClusterOrchestrator

    stocked_out = [{"at_s": 0, "zone": f"{region}-{zone}", "capacity": 0}
                   for region in ("us-central1", "us-west1") for zone in "abc"]
    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path,
                                                   capacity={"default": 4, "schedule": stocked_out})
    try:
        clients = compute_clients_from_env()

        def scaler(configured):
            return ClusterOrchestrator(configured, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients))

        before = _without_added(config)
        functions = FunctionsInvoker(Zen(before, db, publisher, clock, scaler=scaler(before)))
        functions.submit(job_request("waits"))
        for _ in range(3):
            advance(200)
            functions.tick()
        assert instances(ADDED) == []
        # The operator adds europe-west4 (terraform makes its MIG) and deploys.
        FunctionsInvoker(Zen(config, db, publisher, clock, scaler=scaler(config))).tick()
        assert len(instances(ADDED)) >= 1, "no VM asked for the waiting job in the region added for it"
    finally:
        standin.stop()
