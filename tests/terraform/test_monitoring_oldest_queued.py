"""The oldest-QUEUED alert (``zen_oldest_queued``, from the ``scaling.cluster`` line) against a job no VM can take
any longer: a multi-node job whose cluster's ``max_vms_per_region`` was lowered below its nodes. Left QUEUED, out of
the planner's demand (``zen.scaling.fleetdb.pools_of_row``), it kept the alert "the oldest QUEUED job is waiting too
long" firing for a job no capacity could start. The scale tick now holds it PENDING, the hold naming the change
(``zen.jobs.stranding``, docs/how-to/operate.md "Changing a cluster"): it is on neither ``zen stats``' oldest
QUEUED job nor the line, and says why it waits."""

from __future__ import annotations

import json

from tests.messages import job_request
from tests.scaling.test_scaling_integration import CLUSTER, build_stack
from tests.terraform.logging_query import MISSING, extract, matches
from tests.terraform.test_monitoring import captured, metrics, module  # noqa: F401  (the fixtures)
from zen.core.config import ZenConfig
from zen.store import repository, stats

WAITED_S = 3600  # past the alert's default threshold (alert_oldest_queued_minutes: 30)


def lowered(config: ZenConfig, **limits) -> ZenConfig:
    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster.update(limits)
    return ZenConfig.model_validate(raw)


def test_a_job_no_vm_can_take_any_longer_still_ages_the_oldest_queued(module, captured, config, db, publisher,  # noqa: F811
                                                                        clock, db_url, monkeypatch, tmp_path):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    FunctionsInvoker(Zen(config, db, publisher, clock)).submit(job_request("g", nodes=4, regions=["us-west1"]))
    zen, advance, _, standin = build_stack(lowered(config, max_vms_per_region=2), db, publisher, clock,
                                           monkeypatch, tmp_path)  # the operator lowers the limit
    try:
        advance(WAITED_S)
        FunctionsInvoker(zen).tick()
    finally:
        standin.stop()
    with db.transaction() as session:
        held = repository.get_job(session, "g")
        oldest = [r for r in stats.run(session, "oldest_queued", now=clock()) if r["cluster"] == CLUSTER]
    assert held.status.value == "PENDING" and "max_vms_per_region" in (held.hold or ""), (held.status, held.hold)
    assert [r["job_id"] for r in oldest] == []  # `zen stats` no longer counts it as QUEUED
    metric = metrics(module)["zen_oldest_queued"]
    ages = [extract(metric["value"], e) for e in captured() if matches(metric["filter"], e)
            and extract(metric["labels"]["cluster"], e) == CLUSTER]
    assert all(a is MISSING or a < WAITED_S for a in ages), ages
