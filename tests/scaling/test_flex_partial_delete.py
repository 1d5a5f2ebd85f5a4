"""Deletes that do part of their work name what they left (``MigApiError.undeleted``):

- A flex-start pool through the Compute stand-in and the official client (``FlexStartMig``), with
  ``ClusterManager``: a pass deletes an idle flex-start VM and cancels a queued request of the same pool in one
  ``FlexStartMig.delete_instances``; the VM's delete goes through but the cancel is refused (a 403 rate limit).
  The whole call raised, so the VM Compute was deleting was recorded as a HOLD "not deleted: ... the delete
  failed" and left out of ``report.deleted``.
- ``MigManager.delete_instances``'s two calls (below)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from google.api_core import exceptions as gexc

from tests.scaling.fakes import FakeFleet
from tests.scaling.test_manager_apply import Fixed
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.adapters.flex_start import FlexStartMig, request_of, resize_requests_client_from_env
from zen.core.config import ZenConfig, load_config
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Action, Decision, Plan, Timing
from zen.scaling.port import FleetFacts, MigApiError
from zen.scaling.pricing import cluster_pools
from zen_dev.local.compute import ComputeStandIn, ManualClock
from zen_dev.local.compute.resources import ApiError

PROJECT, REGION = "test-proj", "us-central1"
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
ZONES = [f"{REGION}-{z}" for z in "abc"]
CLUSTER = {"name": "flex", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4, "machine_type": "a2-highgpu-4g",
           "regions": [REGION], "max_vms_per_region": 8, "max_vms": 8, "provisioning": ["flex-start"]}


def config() -> ZenConfig:
    return ZenConfig.model_validate({**load_config().model_dump(), "project": PROJECT, "clusters": [CLUSTER],
                                     "queues": []})


@pytest.fixture
def cloud(monkeypatch, tmp_path):
    """Start the stand-in with a capacity schedule: ``cloud(schedule)`` -> (stand-in, the pool's key, its MIG)."""
    started = []

    def start(schedule):
        scenario = {"project": PROJECT, "seed": 1, "capacity": {"schedule": schedule},
                    "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0}}
        standin = ComputeStandIn(scenario, config=config(), clock=ManualClock(), log_dir=tmp_path).start()
        started.append(standin)
        monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
        cluster = config().clusters[0]
        [key] = cluster_pools(cluster)
        flex = FlexStartMig(PROJECT, REGION, cluster.mig_name(REGION, "flex-start"), *compute_clients_from_env(),
                            resize_requests_client_from_env(), run_s=cluster.flex_start_run_s,
                            now=lambda: datetime.fromisoformat(standin.world.ts.at(standin.world.now)))
        return standin, key, flex

    yield start
    for standin in started:
        standin.stop()


def test_a_vm_deleted_beside_a_cancel_that_failed_is_reported_deleted(cloud):
    # Room for one VM (zone a): the first request is granted, the second waits; every cancel is rate limited.
    standin, key, flex = cloud([{"at_s": 0, "zone": z, "capacity": int(z.endswith("a"))} for z in ZONES])
    handle = standin.api.handle

    def limited(method, path, query, body):  # Compute's 403 rateLimitExceeded, on the cancels alone
        if method == "POST" and path.endswith("/cancel"):
            return 403, ApiError(403, "rateLimitExceeded", "Rate Limit Exceeded").body()
        return handle(method, path, query, body)

    standin.api.handle = limited
    cluster = config().clusters[0]
    flex.resize(1)
    standin.advance(120)  # granted and RUNNING
    flex.resize(2)  # a second request: queued (no room)
    instances = flex.read().instances
    [real] = [i.name for i in instances if request_of(i.name) is None]
    [pending] = [i.name for i in instances if request_of(i.name) is not None]
    idle = {"state": "IDLE", "idle_since": NOW, "last_seen_at": NOW}
    fleet = FakeFleet(FleetFacts((), {}, {real: idle}, {}, 0), NOW)
    plan = Plan(delete=[(key, real), (key, pending)],
                decisions=[Decision(Action.DELETE, key, "idle and not needed", vm=real),
                           Decision(Action.DELETE, key, "no queued job wants its flex-start pool", vm=pending)])
    manager = ClusterManager(cluster, fleet, {key: flex}, lambda: NOW, Timing(), Fixed(plan), telemetry=False,
                             concurrent=False, pools=cluster_pools(cluster))
    report = manager.run()
    assert real not in [i.name for i in flex.read().instances if not i.deleting]  # Compute deleted it
    said = [(d.action.value, d.reason) for d in report.decisions if d.vm == real]
    assert said == [("DELETE", "idle and not needed")], said  # not "not deleted: ... the delete failed"
    assert real in report.deleted and pending not in report.deleted


class _Migs:
    delete_instances_unary = None  # never called: _write is replaced


class TwoCalls(MigManager):
    """The first deleteInstances call (zoned refs) goes through; the second (the zoneless probe) is refused."""

    def __init__(self):
        super().__init__("p", "us-central1", "zen-c-us-central1", migs=_Migs(), operations=None)
        self.calls: list[list[str]] = []

    def _write(self, method, **fields):
        refs = list(fields["region_instance_group_managers_delete_instances_request_resource"].instances)
        self.calls.append(refs)
        if len(self.calls) == 2:
            raise MigApiError("deleteInstances refused") from gexc.BadRequest("no such instance")


def test_vms_deleted_by_the_first_call_are_not_named_undeleted():
    """``MigManager.delete_instances`` deletes in two calls (the instances with a zone, then those the listing gave
    none): when the second was refused, the error named nothing, and the VMs Compute was deleting were reported
    "not deleted: ... the delete failed"."""
    mig = TwoCalls()
    with pytest.raises(MigApiError) as raised:
        mig.delete_instances(["idle-vm", "probe"], {"idle-vm": "us-central1-a", "probe": None})
    assert mig.calls[0] == ["zones/us-central1-a/instances/idle-vm"]  # deleted: Compute accepted it
    undeleted = raised.value.undeleted
    assert undeleted is not None and "idle-vm" not in undeleted, (
        f"undeleted={undeleted}: ClusterManager.apply reports idle-vm 'not deleted: drained, but the delete failed'")
