"""Two ways the production scaling path asked past its limits: a MIG unread right after a pass grew it was
counted without that pass's VMs, and a flex-start request granted while its MIG was read was counted nowhere.

Driven as tests/scaling does: the official google-cloud-compute client against the Compute stand-in and a
real Postgres where the fault lives there, recording fakes where it is the manager's own arithmetic."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.scaling.test_scaling_integration import CLUSTER, build_stack
from zen.adapters.compute import MigManager
from zen.core.config import load_config
from zen.scaling.port import MigRateLimited


def _config_with(project, **limits):
    config = load_config().model_copy(update={"project": project})
    clusters = [c.model_copy(update=limits) if c.name == CLUSTER else c for c in config.clusters]
    return config.model_copy(update={"clusters": clusters})


@pytest.fixture
def capped(project, db, publisher, clock, monkeypatch, tmp_path):
    """The usual stack (us-central1 stocked out) with the cluster's max_vms at 2."""
    config = _config_with(project, max_vms=2)
    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path)
    yield zen, advance, instances
    standin.stop()


def _unreadable(monkeypatch, region):
    """``region``'s MIGs answer every read with a rate limit from now on (a 403 rateLimitExceeded)."""
    real_read, real_summaries, real_target = MigManager.read, MigManager.region_summaries, MigManager.target_size

    def read(self, since=None, summary=None):
        if self.region == region:
            raise MigRateLimited("403 rateLimitExceeded")
        return real_read(self, since, summary)

    def summaries(self):
        if self.region == region:
            raise MigRateLimited("403 rateLimitExceeded")
        return real_summaries(self)

    def target(self):
        if self.region == region:
            raise MigRateLimited("403 rateLimitExceeded")
        return real_target(self)

    monkeypatch.setattr(MigManager, "read", read)
    monkeypatch.setattr(MigManager, "region_summaries", summaries)
    monkeypatch.setattr(MigManager, "target_size", target)


# -- 1. an unread MIG counted as the VMs listed before the last pass's adds: max_vms exceeded ------------------

def test_a_mig_unread_right_after_its_resize_still_counts_the_vms_asked_for(capped, monkeypatch):
    """A pass adds 2 VMs in us-west1 (the cluster's max_vms); the next tick cannot read us-west1. It was
    counted as ``len(RegionMemory.known)``: the VMs the last plan *listed*, before that pass's own resize,
    so 0, and europe-west4 got 2 more: 4 VMs in a cluster of max_vms 2. Now as ``RegionMemory.sized``."""
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = capped
    fn = FunctionsInvoker(zen)
    scaler, zen.scaler = zen.scaler, None  # submissions without their own pass
    fn.submit(job_request("a", regions=["us-west1"]))
    fn.submit(job_request("b", regions=["us-west1"]))
    zen.scaler = scaler
    zen.scaler.tick()
    assert len(instances("us-west1")) == 2  # the cluster is at its limit

    zen.scaler = None
    fn.submit(job_request("c", regions=["europe-west4"]))
    fn.submit(job_request("d", regions=["europe-west4"]))
    zen.scaler = scaler
    advance(5)
    _unreadable(monkeypatch, "us-west1")  # e.g. the next tick's reads of us-west1 are rate limited
    zen.scaler.tick()
    monkeypatch.undo()
    total = len(instances("us-west1")) + len(instances("europe-west4")) + len(instances("us-central1"))
    assert total <= 2, f"{total} VMs in a cluster of max_vms 2"


# -- 2. FlexStartMig.read read the target before the pending requests: a grant in between hid its VMs -----

def test_a_request_granted_while_the_flex_mig_is_read_is_still_counted(monkeypatch, tmp_path):
    """``FlexStartMig.read`` read the MIG's target, then its instances, then its pending requests. A request
    Compute granted between those calls was in neither the target read (before the grant) nor the pending
    list (after it), its VMs not yet listed: the pool read as empty and ``resize`` asked for the same VMs a
    second time (4 VMs for 2 wanted). The requests are read first now."""
    from tests.scaling.test_flex_start_mig import CLUSTER as FLEX_CLUSTER, PROJECT, REGION, config, scenario
    from zen.adapters.compute import compute_clients_from_env
    from zen.adapters.flex_start import FlexStartMig, resize_requests_client_from_env
    from zen_dev.local.compute import ComputeStandIn, ManualClock

    standin = ComputeStandIn(scenario(10), config=config(), clock=ManualClock(), log_dir=tmp_path).start()
    try:
        monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
        cluster = config().clusters[0]
        flex = FlexStartMig(PROJECT, REGION, cluster.mig_name(REGION, "flex-start"), *compute_clients_from_env(),
                            resize_requests_client_from_env(), run_s=cluster.flex_start_run_s)
        flex.resize(2)
        assert flex.read().target_size == 2  # pending: counted
        real_instances, real_pending = FlexStartMig.instances, FlexStartMig.pending
        granted = []

        def instances(self):  # the listing Compute answered just before the grant landed ...
            out = real_instances(self)
            if not granted:
                granted.append(standin.advance(31))  # ... and Compute grants the request now
            return out

        monkeypatch.setattr(FlexStartMig, "instances", instances)
        flex.resize(2)  # the apply step's absolute size for the same 2 VMs
        monkeypatch.setattr(FlexStartMig, "instances", real_instances)
        state = flex.read()
        asked = state.target_size
        assert asked == 2, f"{asked} flex-start VMs for a resize to 2 (a second request for the same demand)"
    finally:
        standin.stop()
