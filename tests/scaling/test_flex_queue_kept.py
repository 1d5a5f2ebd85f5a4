"""One-node jobs in a flex-start pool whose queue is slower than the pool's deadline (2 x ``flex_start_estimate_s``,
30 minutes). Each job's VM is a resize request of its own (``resize_requests``): at the deadline the planner kept
the oldest request as the pool's probe and cancelled the others ("not needed as a probe"); the pool stayed blocked
while its probe waited, so nothing was asked for the other jobs until the probe's request was granted, and they
then queued again from the back. The requests of jobs that can go nowhere else are kept now
(``zen.scaling.flexrun.queue_kept``), and counted as supply once the pool delivers again (``granting``): counted
as none, the pool was asked for a new request per job beside them, more VMs than jobs. Those of jobs gone are
cancelled. Through the Compute stand-in and the official client (FlexStartMig), with ``ClusterManager`` and the
planner."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.scaling.test_flex_requests import Fleet
from zen.adapters.compute import compute_clients_from_env
from zen.adapters.flex_start import FlexStartMig, request_of, resize_requests_client_from_env
from zen.core.config import ZenConfig, load_config
from zen.scaling.manager import ClusterManager
from zen.scaling.model import DemandGroup, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts
from zen.scaling.pricing import cluster_pools
from zen_dev.local.compute import ComputeStandIn, ManualClock

PROJECT, REGION = "test-proj", "us-central1"
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
ZONES = [f"{REGION}-a", f"{REGION}-b", f"{REGION}-c"]
CLUSTER = {"name": "flex", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4, "machine_type": "a2-highgpu-4g",
           "regions": [REGION], "max_vms_per_region": 8, "max_vms": 8, "provisioning": ["flex-start"]}


def config() -> ZenConfig:
    return ZenConfig.model_validate({**load_config().model_dump(), "project": PROJECT, "clusters": [CLUSTER],
                                     "queues": []})


def standin(tmp_path, monkeypatch, capacity):
    """No capacity for the first hour, then ``capacity`` (zone -> VMs) from then on."""
    scenario = {"project": PROJECT, "seed": 1,
                "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0},
                "capacity": {"schedule": [{"at_s": 0, "zone": z, "capacity": 0} for z in ZONES]
                             + [{"at_s": 3600, "zone": z, "capacity": n} for z, n in capacity.items()]}}
    cloud = ComputeStandIn(scenario, config=config(), clock=ManualClock(), log_dir=tmp_path).start()
    monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", cloud.endpoint)
    return cloud


class Pool:
    """A flex-start pool's manager, a pass a minute, with ``jobs`` one-node jobs waiting for it."""

    def __init__(self, cloud, jobs: int):
        cluster = config().clusters[0]
        pools = cluster_pools(cluster)
        [self.key] = pools
        self.cloud, self.t = cloud, [NOW]
        self.flex = FlexStartMig(PROJECT, REGION, cluster.mig_name(REGION, "flex-start"), *compute_clients_from_env(),
                                 resize_requests_client_from_env(), run_s=cluster.flex_start_run_s,
                                 now=lambda: datetime.fromisoformat(cloud.world.ts.at(cloud.world.now)))
        self.fleet = Fleet(FleetFacts(self.demand(jobs), {}, {}, {}, 0), NOW)
        self.manager = ClusterManager(cluster, self.fleet, {self.key: self.flex}, lambda: self.t[0], Timing(),
                                      ZenPlanner(), telemetry=False, pools=pools)
        self.jobs, self.cancelled, self.most = jobs, [], 0

    def demand(self, jobs: int) -> tuple[DemandGroup, ...]:
        return (DemandGroup((self.key,), jobs, NOW),) if jobs else ()

    def minutes(self, n: int) -> None:
        for _ in range(n):
            report = self.manager.run()
            self.cancelled += [name for name in report.deleted if request_of(name)]
            self.most = max(self.most, self.held())
            self.fleet._facts = FleetFacts(self.demand(self.jobs), {}, self.agents(), self.fleet.recorded[-1][0], 0)
            self.t[0] += timedelta(minutes=1)
            self.cloud.advance(60)

    def agents(self) -> dict[str, dict]:  # each granted VM's agent up, idle (it has not taken a job yet)
        now = self.t[0]
        return {i.name: {"state": "IDLE", "idle_since": now, "last_seen_at": now, "first_seen_at": now}
                for i in self.flex.read().instances if not request_of(i.name) and i.status == "RUNNING"}

    def vms(self) -> int:
        return len([i for i in self.flex.read().instances if not request_of(i.name)])

    def held(self) -> int:  # VMs and requests' VMs still queued
        return self.vms() + sum(self.flex.pending().values())


@pytest.fixture
def everywhere(tmp_path, monkeypatch):
    cloud = standin(tmp_path, monkeypatch, {z: 3 for z in ZONES})
    yield cloud
    cloud.stop()


@pytest.fixture
def one_then_none(tmp_path, monkeypatch):
    cloud = standin(tmp_path, monkeypatch, {ZONES[0]: 1})
    yield cloud
    cloud.stop()


def test_one_node_jobs_flex_requests_are_not_cancelled_while_they_wait_in_the_queue(everywhere):
    pool = Pool(everywhere, jobs=3)
    pool.minutes(59)  # the queue holds every request
    assert not pool.cancelled and sum(pool.flex.pending().values()) == 3, (pool.cancelled, pool.flex.pending())
    pool.minutes(4)  # capacity comes back at 60 minutes: every job's request is granted at once
    assert sum(pool.flex.pending().values()) == 0 and pool.vms() == 3 and pool.most == 3


def test_a_pool_that_delivers_one_vm_is_not_asked_again_for_the_jobs_whose_requests_wait(one_then_none):
    pool = Pool(one_then_none, jobs=3)
    pool.minutes(70)  # one VM granted at 60 minutes; the two other requests still queued behind it
    assert pool.vms() == 1 and sum(pool.flex.pending().values()) == 2, (pool.vms(), pool.flex.pending())
    assert pool.most == 3, f"{pool.most} VMs held or asked for three jobs"


def test_the_requests_of_jobs_gone_are_cancelled(everywhere):
    pool = Pool(everywhere, jobs=3)
    pool.minutes(40)  # past the deadline: the pool is blocked, its three requests kept
    pool.jobs = 1  # two of the jobs were stopped
    pool.minutes(3)
    assert sum(pool.flex.pending().values()) == 1, pool.flex.pending()
