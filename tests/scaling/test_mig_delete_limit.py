"""Deleting more VMs of one MIG than one deleteInstances call takes, against the Compute stand-in, through the
official google-cloud-compute client: a regional MIG holds up to 2000 instances, a call deletes at most 1000."""

from __future__ import annotations

import pytest

from zen.adapters.compute import MigManager, compute_clients_from_env
from zen_dev.local.compute import ComputeStandIn, ManualClock

PROJECT, REGION, MIG = "test-proj", "us-central1", "zen-1xl4-us-central1"


@pytest.fixture
def cloud(monkeypatch, tmp_path):
    scenario = {
        "project": PROJECT, "seed": 1,
        "migs": [{"name": MIG, "region": REGION, "machine_type": "g2-standard-4", "cluster": "1xl4"}],
        "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0},
        "gpu_quotas": {"default": 5000, "all_regions": 5000},
    }
    standin = ComputeStandIn(scenario, clock=ManualClock(), log_dir=tmp_path).start()
    monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
    yield standin, MigManager(PROJECT, REGION, MIG, *compute_clients_from_env())
    standin.stop()


def test_more_idle_vms_than_one_call_deletes_are_all_deleted(cloud):
    standin, mig = cloud
    mig.resize(1500)
    standin.advance(61)
    instances = mig.instances()  # three pages of listManagedInstances
    assert len(instances) == 1500 and all(i.running for i in instances)
    gone = instances[:1200]  # say, the VMs a 1200-task array ran, idle at once
    mig.delete_instances([i.name for i in gone], {i.name: i.zone for i in gone})
    assert mig.target_size() == 300
    assert sorted(i.name for i in mig.instances()) == sorted(i.name for i in instances[1200:])
