"""An idle flex-start VM whose run ends before a queued job's ``max_runtime_s`` would refuses that job's
claim (``zen.jobs.claims``, ``flex-ending``). The planner counted it as the job's VM all the same: no VM was
asked for the job, and the idle VM, needed by it, was kept: the job waited until GCE ended the VM's run (up
to ``flex_start_run_s``, 7 days), the VM billed idle meanwhile. Now such a VM is no supply for that job's
demand (``zen.scaling.flexrun``): a VM is asked for it, and the old one is scaled down as any idle VM."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.scaling.fakes import FakeFleet, RecordingMig
from zen.core.config import ClusterConfig
from zen.core.provisioning import FLEX_FRESH_S
from zen.scaling.manager import ClusterManager
from zen.scaling.model import DemandGroup, Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigInstance
from zen.scaling.pricing import cluster_pools

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
DAY = 86400.0
OLD_VM = "zen-c-old1"


def _pass(heard_s: float, longest_s: float | None, at: datetime = NOW, count: int = 1, gang: int = 1, part: int = 0,
          running_s: float | None = None):
    """One scaling pass of a flex-start cluster (7-day runs) with one idle VM whose agent first spoke
    ``heard_s`` ago (seen RUNNING ``running_s`` ago by a scaling pass; None: not recorded), and ``count`` queued
    VMs' worth of jobs (a gang's: ``gang``, ``part``) whose longest names ``longest_s`` (its max_runtime_s). The
    MIG's calls, the report."""
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=["us-central1"],
                           max_vms_per_region=4, max_vms=8, provisioning=["flex-start"])
    pools = cluster_pools(config)
    [key] = pools
    calls: list = []
    mig = RecordingMig(key, calls, 1, [MigInstance(OLD_VM, "us-central1-a", "NONE", "RUNNING", None)])
    agents = {OLD_VM: {"state": "IDLE", "idle_since": at - timedelta(seconds=20), "last_seen_at": at,
                       "first_seen_at": at - timedelta(seconds=heard_s),
                       "running_at": None if running_s is None else at - timedelta(seconds=running_s)}}
    demand = (DemandGroup((key,), count, at - timedelta(seconds=30), gang=gang, part=part, longest_s=longest_s),)
    fleet = FakeFleet(FleetFacts(demand, {}, agents, {}, 0), at - timedelta(seconds=heard_s))
    m = ClusterManager(config, fleet, {key: mig}, lambda: at, Timing(), ZenPlanner(), telemetry=False, pools=pools)
    return calls, m.run()


@pytest.mark.parametrize("count, gang, part", [(1, 1, 0), (2, 2, 0), (1, 2, 1)], ids=["job", "gang", "gang-node"])
def test_a_job_outlasting_an_idle_flex_vms_run_gets_vms_of_its_own(count, gang, part):
    """Six days into a seven-day run: about a day left (less the boot estimate), and the job may run two.
    A gang's too: neither matched to the VM nor handed it as a spare when its VMs are asked for (a gang
    of two got one VM, and one node short got none)."""
    calls, report = _pass(heard_s=6 * DAY, longest_s=2 * DAY, count=count, gang=gang, part=part)
    assert sum(report.added.values()) == count, (report.added, [d.reason for d in report.decisions], calls)


def test_a_job_naming_no_max_runtime_gets_a_vm_of_its_own_past_an_idle_flex_vm_within_the_margin_of_its_end():
    """Ten minutes before its run's end (less than ``flex_end_margin_s``), the VM refuses a job that names no
    max_runtime_s (the claims hold it to the margin alone): counted as its VM, no VM was asked for it."""
    calls, report = _pass(heard_s=7 * DAY - 600, longest_s=None)
    assert sum(report.added.values()) == 1, (report.added, [d.reason for d in report.decisions], calls)


def test_a_flex_vm_slow_to_boot_counts_its_run_from_when_it_ran():
    """Its agent first spoke five days ago, but a scaling pass saw its VM RUNNING six and a half days ago (a startup
    of a day and a half, its agent stuck): GCE ends its run in half a day, less than the job's day. Counted from the
    agent's first word it had two days left, and was the job's VM: no VM was asked, and the claim was refused."""
    calls, report = _pass(heard_s=5 * DAY, longest_s=DAY, running_s=6.5 * DAY)
    assert sum(report.added.values()) == 1, (report.added, [d.reason for d in report.decisions], calls)


@pytest.mark.parametrize("heard_s, longest_s", [
    (6 * DAY, 0.5 * DAY),  # the run outlasts the job
    (6 * DAY, None),  # no max_runtime_s: held to the margin alone (as the claims), and a day is left
    (FLEX_FRESH_S - 60, 7 * DAY),  # heard from for under FLEX_FRESH_S: the VM asked for the job
])
def test_an_idle_flex_vm_the_job_may_take_covers_it(heard_s, longest_s):
    calls, report = _pass(heard_s=heard_s, longest_s=longest_s)
    assert not report.added and not report.deleted, (report.added, report.deleted, calls)


class _SharingFleet(FakeFleet):
    def __init__(self, facts, queued, loads):
        super().__init__(facts, NOW - timedelta(days=6))
        self.queued, self.loads = queued, loads

    def shared_load(self, cluster, now=None):
        return self.queued, self.loads


@pytest.mark.parametrize("longest_s, asked", [(2 * DAY, 1), (0.5 * DAY, 0)])
def test_a_busy_flex_vm_whose_run_ends_first_has_no_room_for_the_job(longest_s, asked):
    """Several jobs per VM (``max_jobs_per_vm``): a busy flex-start VM six days into its run, with room for a
    4-GPU job, was counted as that job's supply (``zen.scaling.sharing``) though it would refuse its claim: no
    VM was asked, and the job waited while the VM stayed busy. A job its run outlasts still fits there."""
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=8, regions=["us-central1"],
                           max_vms_per_region=4, max_vms=8, provisioning=["flex-start"], max_jobs_per_vm=2)
    pools = cluster_pools(config)
    [key] = pools
    calls: list = []
    mig = RecordingMig(key, calls, 1, [MigInstance(OLD_VM, "us-central1-a", "NONE", "RUNNING", None)])
    agents = {OLD_VM: {"state": "BUSY", "idle_since": None, "last_seen_at": NOW, "first_seen_at": NOW - timedelta(days=6)}}
    queued = [{"priority": 0, "regions": [key], "gpus": 4, "jobs": 1, "oldest": NOW - timedelta(seconds=30),
               "longest": longest_s}]
    fleet = _SharingFleet(FleetFacts((), {OLD_VM: "j0"}, agents, {}, 0), queued, {OLD_VM: (1, 4)})
    m = ClusterManager(config, fleet, {key: mig}, lambda: NOW, Timing(), ZenPlanner(), telemetry=False, pools=pools)
    report = m.run()
    assert sum(report.added.values()) == asked, ([d.reason for d in report.decisions], calls)


def test_an_idle_flex_vm_without_time_for_the_jobs_upload_after_its_run_gets_it_a_vm_of_its_own():
    """Six days into a seven-day run, and a job that may run 10 minutes less than what is left: its run fits, its
    stop grace and upload after it (``Timing.flex_end_margin_s``, as the claim counts it) do not. The VM was
    counted as the job's, whose claim is refused: the job waited on it."""
    left = DAY - Timing().boot_estimate_s
    calls, report = _pass(heard_s=6 * DAY, longest_s=left - 600)
    assert sum(report.added.values()) == 1, (report.added, [d.reason for d in report.decisions], calls)
