"""A tag a queued job requires leaves every region of its cluster (the configuration changed): `zen explain` says so and
what to do (it said "admitted; waiting for a VM of 4xa100-40gb in us-west1")."""

from __future__ import annotations

import json

from tests.messages import job_request
from zen.core.config import ZenConfig
from zen.store import repository

C = "4xa100-40gb"


def _changed(config: ZenConfig, change) -> ZenConfig:
    raw = json.loads(config.model_dump_json())
    change(raw)
    return ZenConfig.model_validate(raw)


def _make(cfg, db, publisher, clock):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(cfg, db, publisher, clock)
    return zen, FunctionsInvoker(zen)


def _job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def _explain(zen, job_id):
    from zen.cli.queues import explain_line

    with zen.db.transaction() as session:
        return explain_line(session, zen.config, repository.get_job(session, job_id))


def _tagged(raw, tags):
    for cluster in raw["clusters"]:
        if cluster["name"] == C:
            cluster["region_tags"] = tags


def test_explain_of_a_queued_job_whose_required_tag_left_every_region(config, db, publisher, clock, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    _, before = _make(_changed(config, lambda raw: _tagged(raw, {"us-west1": ["hipaa"]})), db, publisher, clock)
    before.submit(job_request("t", requires_tags=["hipaa"]))
    zen, after = _make(config, db, publisher, clock)  # the tag is gone from every region
    job = _job(zen, "t")
    why = _explain(zen, "t")
    assert job.status.value == "QUEUED"
    assert "carries the tags ['hipaa'] it requires now" in why and "stop it and submit it again" in why, why
