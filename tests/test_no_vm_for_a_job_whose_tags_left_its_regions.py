"""A queued job whose required tags left the regions it was allowed (the operator changed the configuration while
it waited: a tag moved to another region, or no region carries it any more) gets no GPU VM where it cannot run.
The scale tick looks before it counts the demand: the job is narrowed to the regions that carry its tags now and
its start sent there, a VM asked for there alone; with none, it goes back to PENDING, held with the reason
(`zen explain` names the tags), and no VM is asked for it. Booted for it, a VM was billed for nothing until its
first claim was refused. Once a region carries the tags again, the tick lets the job go there."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.scaling.test_scaling_integration import build_stack
from tests.test_data_clearance import INPUT, configured
from tests.test_job_no_region_may_run import _tags
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.app import Zen
from zen.scaling.manager import ClusterOrchestrator
from zen.store import repository

REGIONS = ("us-central1", "us-west1", "europe-west4")  # the cluster's


@pytest.fixture
def changed(config, db, publisher, clock, monkeypatch, tmp_path):
    """``changed(before, after, request)``: the request submitted under ``before`` (no scaling pass ran), then
    Zen under ``after`` with its scaler; returns (Zen, its functions, the VMs by region: a function)."""
    from zen_dev.local.invoke import FunctionsInvoker

    stands = []

    def change(before, after, request):
        old, _, instances, standin = build_stack(before, db, publisher, clock, monkeypatch, tmp_path)
        stands.append(standin)
        old.scaler = None
        FunctionsInvoker(old).submit(request)
        clients = compute_clients_from_env()
        scaler = ClusterOrchestrator(after, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients))
        zen = Zen(after, db, publisher, clock, scaler=scaler)
        return zen, FunctionsInvoker(zen), lambda: {r: len(instances(r)) for r in REGIONS}

    yield change
    for standin in stands:
        standin.stop()


def _job(zen, job_id, config):
    from zen.cli.queues import explain_line

    with zen.db.transaction() as session:
        job = repository.get_job(session, job_id)
        return job, explain_line(session, config, job)


def test_a_job_whose_tag_left_every_region_gets_no_vm_and_runs_once_a_region_has_it_again(config, db, publisher, clock,
                                                                                       changed):
    from zen_dev.local.invoke import FunctionsInvoker

    tagged, untagged = _tags(config, {"us-west1": ["hipaa"]}), _tags(config, {})
    zen, fn, vms = changed(tagged, untagged, job_request("phi", requires_tags=["hipaa"]))
    fn.tick()
    assert vms() == {r: 0 for r in REGIONS}, "a GPU VM booted for a job no region may run"
    job, why = _job(zen, "phi", untagged)
    assert job.status.value == "PENDING" and "hipaa" in why and "no region" in why, why

    # The operator tags us-west1 again: the tick that looks at the job again lets it go there, a VM asked for it.
    clients = compute_clients_from_env()
    scaler = ClusterOrchestrator(tagged, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients))
    zen = Zen(tagged, db, publisher, clock, scaler=scaler)
    clock.advance(300)
    FunctionsInvoker(zen).tick()
    job, _ = _job(zen, "phi", tagged)
    assert (job.status.value, job.regions, job.hold) == ("QUEUED", ["us-west1"], None)
    assert vms() == {"us-central1": 0, "us-west1": 1, "europe-west4": 0}


@pytest.mark.parametrize("asked", [dict(requires_tags=["hipaa"]), dict(inputs=INPUT)], ids=["its-tags", "its-data"])
def test_a_job_whose_tag_moved_gets_its_vm_where_the_tag_is_now(config, changed, asked):
    before = configured(config, region_tags={"us-west1": ["hipaa"]})
    after = configured(config, region_tags={"europe-west4": ["hipaa"]})
    zen, fn, vms = changed(before, after, job_request("phi", **asked))
    fn.tick()
    assert vms() == {"us-central1": 0, "us-west1": 0, "europe-west4": 1}, "a GPU VM booted where the job may not run"
    job, _ = _job(zen, "phi", after)
    assert (job.status.value, job.regions) == ("QUEUED", ["europe-west4"])
    with zen.db.transaction() as session:
        history = [row["reason"] for row in repository.job_history(session, "phi")]
    assert "us-west1 no longer carries the tags ['hipaa']" in history[-1], history
