"""Two clusters draw on the same GPU quotas (GPUS_ALL_REGIONS, a region's NVIDIA_A100_GPUS); each counts its own
asks against the tick's read, so between two reads both may ask for the room it left, and Compute refuses the second
with QUOTA_EXCEEDED. That refusal names GPUS_ALL_REGIONS, a quota the tick reads, and the pool it struck stayed
blocked after the other cluster's VMs were gone and a read found the room again: its jobs waited out the block (3 to
15 minutes) with the quota free. A read with room now lifts it, as it lifts the read's own blocks; a refusal naming
a quota the tick does not read (or none) still runs its course."""

from __future__ import annotations

from dataclasses import replace as replaced

import pytest

from tests.scaling.test_gpu_quotas import quota_standin
from tests.scaling.test_planner import LIMITS, at, jobs, snap
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.core.quotas import ALL_REGIONS, named
from zen.scaling.model import Action, ErrorKind, MigError
from zen.scaling.planner import ZenPlanner

FOUR, EIGHT = "4xa100-40gb", "8xa100-40gb"  # 4 and 8 A100s a VM, the same regions
CENTRAL = LIMITS.regions[0]


@pytest.fixture
def two_four_gpu_vms_in_all(config, monkeypatch, tmp_path):
    with quota_standin(config, monkeypatch, tmp_path, {"regions": {}, "all_regions": 8}, capacity=8) as running:
        yield running


def test_compute_names_the_gpu_quota_it_refused_for():
    assert named("Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 8.0 in all regions.") == "GPUS_ALL_REGIONS"
    assert named("Quota 'PREEMPTIBLE_NVIDIA_A100_GPUS' exceeded.  Limit: 16.0 in region us-central1.") == \
        "PREEMPTIBLE_NVIDIA_A100_GPUS"
    assert named("Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1.") is None  # not read by the tick
    assert named(None) is None and named("no room") is None


def test_compute_s_refusal_read_through_the_official_client_names_its_quota(two_four_gpu_vms_in_all, config):
    clients = compute_clients_from_env()
    central = [MigManager(config.project, "us-central1", config.cluster(c).mig_name("us-central1"), *clients)
               for c in (FOUR, EIGHT)]
    central[0].resize(2)  # two 4-GPU VMs fill GPUS_ALL_REGIONS
    central[1].resize(1)  # another cluster's 8-GPU VM: refused
    [error] = central[1].errors()
    assert (error.kind, error.quota) == (ErrorKind.QUOTA, ALL_REGIONS), error
    assert central[0].errors() == []


def _refused(quota: str | None) -> MigError:
    return MigError(CENTRAL, ErrorKind.QUOTA, at(0), f"zen-{EIGHT}-{CENTRAL}-abcd", quota=quota)


def test_a_pool_refused_for_a_gpu_quota_the_tick_reads_is_unblocked_by_a_read_with_room():
    """Compute refused the pool's VM for GPUS_ALL_REGIONS (another cluster's VMs filled it between two reads); the
    next tick's read finds room (those VMs gone). The pool stayed blocked for its whole block, its jobs waiting."""
    first = ZenPlanner().plan(replaced(snap(0, queued=jobs(1, regions=(CENTRAL,)), errors=[_refused(ALL_REGIONS)]),
                                       quota_room={}))
    assert first.memory[CENTRAL].quota_block == f"refused:{ALL_REGIONS}"
    held = [d.reason for d in first.decisions if d.action is Action.HOLD]
    assert held and f"Compute refused VMs for a quota (QUOTA_EXCEEDED: {ALL_REGIONS}) in {CENTRAL}" in held[0], held
    later = ZenPlanner().plan(replaced(snap(60, queued=jobs(1, regions=(CENTRAL,)), memory=first.memory),
                                       quota_room={}))
    assert [d.reason for d in later.decisions if d.action is Action.UNBLOCK and d.region == CENTRAL] == [
        "the tick's GPU quota read finds room for more again"], later.decisions
    assert later.add == {CENTRAL: 1}


def test_a_refusal_for_a_quota_the_tick_does_not_read_runs_its_course():
    first = ZenPlanner().plan(replaced(snap(0, queued=jobs(1, regions=(CENTRAL,)), errors=[_refused(None)]),
                                       quota_room={}))
    assert first.memory[CENTRAL].quota_block == "refused"
    later = ZenPlanner().plan(replaced(snap(60, queued=jobs(1, regions=(CENTRAL,)), memory=first.memory),
                                       quota_room={}))
    assert not [d for d in later.decisions if d.action is Action.UNBLOCK], later.decisions
    assert later.add == {}


@pytest.mark.parametrize("message, quota", [
    ("Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally.", ALL_REGIONS),
    ("The GPUS-ALL-REGIONS-per-project quota maximum has been exceeded. Current limit: 0.0. Metric: "
     "compute.googleapis.com/gpus_all_regions.", ALL_REGIONS),
    ("Quota 'NVIDIA_A100_80GB_GPUS' exceeded.  Limit: 8.0 in region us-central1.", "NVIDIA_A100_80GB_GPUS"),
    ("Quota 'COMMITTED_NVIDIA_A100_GPUS' exceeded.  Limit: 8.0 in region us-central1.", None),  # not read
    ("Quota 'NVIDIA_T4_VWS_GPUS' exceeded.  Limit: 1.0 in region us-central1.", None),
    ("Quota 'GPUS_PER_GPU_FAMILY' exceeded.  Limit: 8.0 in region us-central1.", None),
])
def test_the_quotas_named_are_those_the_tick_reads(message, quota):
    assert named(message) == quota


def test_a_stockout_beside_a_refusal_for_a_gpu_quota_keeps_its_block():
    from zen.scaling import probes

    stockout = MigError(CENTRAL, ErrorKind.STOCKOUT, at(0), f"zen-{EIGHT}-{CENTRAL}-efgh")
    assert probes.quota_kind([_refused(ALL_REGIONS), stockout]) == "refused"  # no read lifts a stockout
    assert probes.quota_kind([_refused(ALL_REGIONS), _refused("NVIDIA_A100_GPUS")]) == \
        "refused:GPUS_ALL_REGIONS,NVIDIA_A100_GPUS"


def test_a_failed_flex_start_request_names_its_gpu_quotas_only_when_each_refusal_names_one():
    from google.cloud import compute_v1

    from zen.adapters.flex_start import _named_quota

    gpus = compute_v1.Errors(code="QUOTA_EXCEEDED", message="Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 8.0 globally.")
    cpus = compute_v1.Errors(code="QUOTA_EXCEEDED", message="Quota 'A2_CPUS' exceeded.  Limit: 96.0 in region x.")
    assert _named_quota([gpus]) == ALL_REGIONS
    assert _named_quota([gpus, cpus]) is None  # its CPUs' refusal stays: no GPU read lifts it (it read the first alone)
    assert _named_quota([compute_v1.Errors(code="ZONE_RESOURCE_POOL_EXHAUSTED", message="no capacity")]) is None
