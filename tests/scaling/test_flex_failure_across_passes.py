"""A failed flex-start resize request is reported by the one read that deletes it (``zen.adapters.flex_start``). The
tick reads every MIG before it takes a cluster's lock; when another pass planned the cluster in between (a
submission on another function instance), the tick's pass reads the MIGs again, and the failure its first read
reported (and deleted) was dropped with that read: the pool was never struck, and the job's requests were asked
there again, pass after pass, each failing the same way with nothing said."""

from __future__ import annotations

import json

import pytest

from tests.messages import job_request
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.adapters.flex_start import FlexStartMig, resize_requests_client_from_env
from zen.app import Zen
from zen.core.config import ZenConfig
from zen.scaling.manager import ClusterOrchestrator
from zen_dev.local.compute import ComputeStandIn, ManualClock as CloudClock

CLUSTER = "4xa100-40gb"  # regions: us-central1, us-west1, europe-west4


@pytest.fixture
def flex_stack(config, db, publisher, clock, monkeypatch, tmp_path):
    """Two Zens (two function instances) over one Postgres and a Compute stand-in whose cluster runs flex-start
    VMs alone, with no GPU free anywhere (no request is granted); the stand-in and the Zen clocks move together."""
    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster.update(provisioning=["flex-start"], max_start_wait_s=900, flex_start_min_wait_s=300,
                           flex_start_run_s=86400)
    config = ZenConfig.model_validate(raw)
    scenario = {"project": config.project, "seed": 3, "capacity": {"default": 0},
                "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0}}
    standin = ComputeStandIn(scenario, clock=CloudClock(), config=config, log_dir=tmp_path).start()
    monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
    clients, requests = compute_clients_from_env(), resize_requests_client_from_env()

    def mig(project, region, name, model):
        return FlexStartMig(project, region, name, *clients, requests, run_s=86400,
                            now=lambda: clock())

    def instance() -> Zen:
        return Zen(config, db, publisher, clock, scaler=ClusterOrchestrator(config, db, clock, mig))

    yield instance(), instance(), standin, config
    standin.stop()


def _flex_migs(standin, config):
    names = {config.cluster(CLUSTER).mig_name(r, "flex-start") for r in config.cluster(CLUSTER).regions}
    return [m for m in standin.world.migs.values() if m.name in names]


def _fail_every_queued_request(standin, config) -> set[str]:
    """Compute gives every queued request of the cluster up (FAILED); the pools they were in."""
    failed = set()
    with standin.world.lock:
        for mig in _flex_migs(standin, config):
            for request in standin.world.resize_requests.of(mig):
                if request.state == "ACCEPTED":
                    standin.world.resize_requests.fail(request, "ZONE_RESOURCE_POOL_EXHAUSTED", "no A100s here")
                    failed.add(mig.spec.region)
    return failed


def test_a_failed_request_the_ticks_read_reported_strikes_its_pool_when_another_pass_planned_in_between(
        flex_stack, clock, monkeypatch):
    from zen_dev.local.invoke import FunctionsInvoker

    ticker, other, standin, config = flex_stack
    FunctionsInvoker(other).submit(job_request("a", cluster=CLUSTER, provisioning="flex-start",
                                               max_start_wait_s=900, max_runtime_s=3600))
    clock.advance(30)
    failed = _fail_every_queued_request(standin, config)
    assert failed  # the submission's pass asked, and Compute refused every request it made
    real_scale = ClusterOrchestrator.scale
    between: list[str] = []

    def scale(self, cluster, states=None, *rest):
        if self is ticker.scaler and states is not None and cluster == CLUSTER and not between:
            between.append(cluster)  # another instance plans the cluster after the tick read the MIGs
            other.scaler.scale(CLUSTER)
        return real_scale(self, cluster, states, *rest)

    monkeypatch.setattr(ClusterOrchestrator, "scale", scale)
    FunctionsInvoker(ticker).tick()
    assert between
    with ticker.db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=100)
    struck = {d["region"].removesuffix("-flex") for d in decisions if d["action"] == "BLOCK"}
    assert struck >= failed, (failed, [(d["action"], d["region"], d["reason"]) for d in decisions])


@pytest.mark.parametrize("next_pass", ["the same instance", "another instance"])
def test_a_failed_request_read_by_a_tick_whose_pass_was_skipped_strikes_its_pool_at_the_next_pass(
        flex_stack, clock, next_pass):
    """The tick's read reported the failure, and its pass was skipped: another pass held the cluster's lock. The next
    pass runs on the same function instance, or on another (the tick's was stopped, or the next tick went to a new
    one): the failure, reported once, still strikes the pool, and nothing more is asked there."""
    from zen.scaling.fleetdb import FleetDb
    from zen_dev.local.invoke import FunctionsInvoker

    ticker, other, standin, config = flex_stack
    FunctionsInvoker(other).submit(job_request("a", cluster=CLUSTER, provisioning="flex-start",
                                               max_start_wait_s=900, max_runtime_s=3600))
    clock.advance(30)
    failed = _fail_every_queued_request(standin, config)
    assert failed
    with FleetDb(ticker.db, {}).cluster_lock(CLUSTER) as locked:  # another instance's pass holds the cluster
        assert locked
        [report] = [r for c, r in ticker.scaler.tick().items() if c == CLUSTER]
    assert report.skipped
    clock.advance(60)
    FunctionsInvoker(ticker if next_pass == "the same instance" else other).tick()
    with other.db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=100)
    struck = {d["region"] for d in decisions if d["action"] == "BLOCK"}
    assert struck >= failed, (failed, [(d["action"], d["region"], d["reason"]) for d in decisions])
    asked_again = {m.spec.region for m in _flex_migs(standin, config)
                   if any(q.state == "ACCEPTED" for q in standin.world.resize_requests.of(m))}
    assert not asked_again & failed, f"asked again where the requests failed: {sorted(asked_again & failed)}"
