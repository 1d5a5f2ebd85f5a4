"""Execution groups (tags): a job with requires_tags runs only where the VMs carry them, is never
scaled for elsewhere, is rejected when no region could run it, and a claim from a VM without the
tags is refused even if the start message reached it."""

from __future__ import annotations

import json

import pytest

from tests.messages import heartbeat, job_request
from zen.core.config import ZenConfig
from zen.core.errors import ConfigError
from zen.store import repository


@pytest.fixture
def tagged(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == "4xa100-40gb":
            cluster["region_tags"] = {"us-central1": ["hipaa"]}
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def test_a_job_requiring_a_tag_is_allowed_only_in_regions_that_carry_it(tagged, publisher):
    zen, functions = tagged
    functions.submit(job_request("phi-1", requires_tags=["hipaa"]))
    with zen.db.transaction() as session:
        job = repository.get_job(session, "phi-1")
    assert job.regions == ["us-central1"] and job.status.value == "QUEUED"
    [start] = publisher.on("zen-job-start")
    assert start.attributes["requires_tags"] == "hipaa" and "allow_any" not in start.attributes
    assert "allow_us_central1" in start.attributes and "allow_us_west1" not in start.attributes


def test_a_job_no_region_could_run_is_rejected_with_the_tags_by_region(tagged):
    zen, functions = tagged
    functions.submit(job_request("phi-2", requires_tags=["hipaa"], regions=["us-west1", "europe-west4"]))
    functions.submit(job_request("phi-3", cluster="1xl4", requires_tags=["hipaa"]))
    with zen.db.transaction() as session:
        reasons = [r["reason"] for r in repository.list_rejections(session)]
    assert reasons[0] == ("no allowed region of cluster 4xa100-40gb carries the tags ['hipaa'] "
                          "(tags by region: us-west1: none; europe-west4: none)")
    assert reasons[1].startswith("no allowed region of cluster 1xl4 carries the tags ['hipaa']")


def test_a_claim_from_a_vm_without_the_tags_is_released_and_one_with_them_wins(tagged, publisher):
    zen, functions = tagged
    functions.submit(job_request("phi-4", requires_tags=["hipaa"]))
    functions.heartbeat(heartbeat("phi-4", "CLAIMED", 1, vm="vm-untagged"))  # a misrouted start message
    functions.heartbeat(heartbeat("phi-4", "CLAIMED", 1, vm="vm-cleared", tags=["hipaa", "gpu"]))
    controls = [(json.loads(m.data)["vm"], json.loads(m.data)["action"]) for m in publisher.on("zen-vm-control")]
    assert controls == [("vm-untagged", "RELEASE"), ("vm-cleared", "CONFIRM")]
    with zen.db.transaction() as session:
        assert repository.get_job(session, "phi-4").vm == "vm-cleared"


def with_region_tags(config, region_tags):
    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == "4xa100-40gb":
            cluster["region_tags"] = region_tags
    return ZenConfig.model_validate(raw)


def functions_with(config, db, publisher, clock, region_tags):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(with_region_tags(config, region_tags), db, publisher, clock)
    return zen, FunctionsInvoker(zen)


def test_a_tag_moved_after_submission_holds_claims_to_where_it_is_now(config, db, publisher, clock):
    """The job waits; the operator moves hipaa from us-central1 to us-west1. An old us-central1 VM, booted
    from the old template, still reports hipaa: its claim won and the job ran where the tag no longer is.
    A VM there without it was told RELEASE and the start sent to us-central1 again, for ever. Now the
    job is narrowed to where the tag is, and its start goes there."""
    zen, functions = functions_with(config, db, publisher, clock, {"us-central1": ["hipaa"]})
    functions.submit(job_request("phi-5", requires_tags=["hipaa"], regions=["us-central1", "us-west1"]))
    zen, functions = functions_with(config, db, publisher, clock, {"us-west1": ["hipaa"]})
    functions.heartbeat(heartbeat("phi-5", "CLAIMED", 1, vm="vm-old", tags=["hipaa"]))  # stale template
    with zen.db.transaction() as session:
        job = repository.get_job(session, "phi-5")
    assert (job.status.value, job.vm, job.regions) == ("QUEUED", None, ["us-west1"])
    orders = [(json.loads(m.data)["vm"], json.loads(m.data)["action"]) for m in publisher.on("zen-vm-control")]
    assert orders == [("vm-old", "RELEASE")]
    *_, again = publisher.on("zen-job-start")
    assert "allow_us_west1" in again.attributes and "allow_us_central1" not in again.attributes
    functions.heartbeat(heartbeat("phi-5", "CLAIMED", 2, vm="vm-west", region="us-west1", zone="us-west1-b",
                                  tags=["hipaa"]))
    assert orders_of(publisher, "vm-west") == ["CONFIRM"]


def test_a_job_no_region_can_run_any_more_waits_its_claim_refused_with_the_reason(config, db, publisher, clock):
    """As any job no VM can take after a configuration change (docs/how-to/operate.md): cancelled, it was lost
    to a change applied to the functions before terraform replaced the old templates, or undone."""
    zen, functions = functions_with(config, db, publisher, clock, {"us-central1": ["hipaa"]})
    functions.submit(job_request("phi-6", requires_tags=["hipaa"]))
    zen, functions = functions_with(config, db, publisher, clock, {})
    functions.heartbeat(heartbeat("phi-6", "CLAIMED", 1, vm="vm-old", tags=["hipaa"]))
    with zen.db.transaction() as session:
        job = repository.get_job(session, "phi-6")
        [refused] = [r["reason"] for r in repository.list_rejections(session)]
    assert (job.status.value, job.vm) == ("PENDING", None) and orders_of(publisher, "vm-old") == ["RELEASE"]
    assert job.hold.startswith("no region of its may run it now: region us-central1 no longer carries the tags")
    assert "no longer carries the tags ['hipaa']" in refused and "it waits until the configuration has one" in refused


def orders_of(publisher, vm):
    return [json.loads(m.data)["action"] for m in publisher.on("zen-vm-control") if json.loads(m.data)["vm"] == vm]


def test_tags_are_validated_in_the_configuration(config, tmp_path):
    import yaml

    from zen.core.config import load_config

    raw = json.loads(config.model_dump_json())
    raw["clusters"][0]["region_tags"] = {"mars-north1": ["x"]}
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="region_tags names regions the cluster does not use: mars-north1"):
        load_config(path)


def test_the_agent_reports_its_configured_tags_in_job_heartbeats(config, tmp_path):
    import os
    import subprocess
    import sys

    import yaml

    raw = json.loads(config.model_dump_json())
    raw["clusters"][1]["region_tags"] = {"us-central1": ["hipaa"]}
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    env = {"ZEN_CONFIG": str(path), "ZEN_VM_NAME": "vm-1", "ZEN_ZONE": "us-central1-a", "ZEN_CLUSTER": "4xa100-40gb",
           "ZEN_PROJECT": "p", "PATH": "/usr/bin:/bin",
           **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    done = subprocess.run([sys.executable, "-m", "zen.agent", "--check"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert json.loads(done.stdout)["identity"]["tags"] == ["hipaa"], done.stderr


def test_narrowing_keeps_the_jobs_own_region_order(config):
    """The regions a job may use now keep its order (its data's region first, zen.core.locality), which the
    planner ranks by; they were re-sorted in the cluster's order."""
    from zen.core.models import Job
    from zen.jobs.placement import regions_cleared_now

    cluster = config.cluster("4xa100-40gb")
    data_first = list(reversed(cluster.regions))
    job = Job.model_construct(cluster="4xa100-40gb", regions=data_first, request={"requires_tags": ["hipaa"]})
    moved = with_region_tags(config, {r: ["hipaa"] for r in cluster.regions[1:]})
    assert regions_cleared_now(moved, job) == [r for r in data_first if r != cluster.regions[0]]
