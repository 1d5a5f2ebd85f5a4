"""A multi-node job accepted while its cluster could hold it (``check_nodes``: nodes <= max_vms_per_region and
max_vms), whose cluster's limits were then lowered below its nodes, can never start: a gang runs in one region.
``zen explain`` said it waited for VMs, and each ``gangs.assemble_s`` the cluster's idle VMs claimed parts and
sat on them, held from every other job and billed, then were released and the gang retried as a new attempt
(which spends nothing), for ever. Now its claims are refused and ``zen explain`` says why it waits, as for a
job whose cluster, model or regions went."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from zen.core.config import ZenConfig
from zen.store import repository

CLUSTER = "4xa100-40gb"  # the default configuration: max_vms 8, max_vms_per_region 4


def _lowered(config: ZenConfig, **limits) -> ZenConfig:
    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster.update(limits)
    return ZenConfig.model_validate(raw)


def test_a_queued_gang_its_cluster_can_no_longer_hold_says_so(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen.cli.queues import explain_line
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    FunctionsInvoker(Zen(config, db, publisher, clock)).submit(job_request("g", nodes=4, regions=["us-west1"]))
    after = Zen(_lowered(config, max_vms_per_region=2), db, publisher, clock)  # the operator lowers the limit
    with after.db.transaction() as session:
        job = repository.get_job(session, "g")
        why = explain_line(session, after.config, job)
    assert job.status.value == "QUEUED" and job.nodes == 4
    # As for a job whose cluster, model or regions went (_stranded): it can never start, say so.
    assert "no VM can take it" in why and "max_vms_per_region" in why, why


def test_no_vm_is_held_for_a_gang_its_cluster_can_no_longer_hold(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    FunctionsInvoker(Zen(config, db, publisher, clock)).submit(job_request("g", nodes=4, regions=["us-west1"]))
    after = FunctionsInvoker(Zen(_lowered(config, max_vms_per_region=2), db, publisher, clock))
    # Two idle VMs of us-west1 (all the region may now have) take the start: both claims are accepted and
    # each VM is held by the gang, which can never complete (4 nodes, at most 2 VMs in a region).
    for seq, vm in enumerate(("vm-a", "vm-b"), start=1):
        after.heartbeat(heartbeat("g", "CLAIMED", seq, vm=vm, region="us-west1", zone="us-west1-a"))
    with db.transaction() as session:
        job = repository.get_job(session, "g")
    assert not job.gang, f"VMs held for a gang that can never assemble: {[n.vm for n in job.gang]}"
