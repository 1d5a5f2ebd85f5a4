"""A compact cluster's MIGs in the Compute stand-in (``compact: true``; terraform gives them the target shape
ANY_SINGLE_ZONE and a compact placement policy): every VM of the region in one zone, the one with the most
room for the first, the one its VMs hold after; a VM that does not fit there waits as a stockout although
another zone has room. Driven through the official client, as tests/local/test_compute_standin.py."""

from __future__ import annotations

import pytest

from tests.local.test_compute_standin import Cloud, by_state
from zen.core.config import ZenConfig
from zen_dev.local.compute import ComputeStandIn, ManualClock

PROJECT, REGION = "test-proj", "us-central1"
CLUSTER = {"gpu_type": "nvidia-tesla-a100", "gpu_count": 8, "machine_type": "a2-highgpu-8g", "regions": [REGION],
           "max_vms_per_region": 4, "max_vms": 4, "provisioning": ["spot"]}
SCENARIO = {"project": PROJECT, "seed": 3,
            "capacity": {"schedule": [{"at_s": 0, "zone": f"{REGION}-a", "capacity": 1},
                                      {"at_s": 0, "zone": f"{REGION}-b", "capacity": 2},
                                      {"at_s": 0, "zone": f"{REGION}-c", "capacity": 1}]},
            "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 20,
                        "preempt_stop_s": 10}}


@pytest.fixture
def cloud(tmp_path):
    def make(compact: bool) -> tuple[Cloud, str]:
        config = ZenConfig.model_validate({"project": PROJECT, "clusters": [
            {"name": "8xa100", **CLUSTER, "compact": compact}]})
        standin = ComputeStandIn(SCENARIO, clock=ManualClock(), log_dir=tmp_path / "vm-logs", config=config).start()
        started.append(standin)
        return Cloud(standin), config.clusters[0].mig_name(REGION, "spot")

    started: list[ComputeStandIn] = []
    yield make
    for standin in started:
        standin.stop()


def _zones(instances) -> list[str]:
    return sorted(i.instance.split("/zones/")[1].split("/")[0] for i in instances if i.instance_status)


def test_a_compact_clusters_vms_share_the_zone_with_the_most_room_and_the_rest_wait(cloud):
    compact, mig = cloud(compact=True)
    assert compact.migs.get(**compact.kw(mig)).distribution_policy.target_shape == "ANY_SINGLE_ZONE"
    compact.resize(3, mig=mig)
    instances = compact.instances(mig=mig)
    assert _zones(instances) == [f"{REGION}-b", f"{REGION}-b"]  # b has room for two; a and c are not used
    (waiting,) = [i for i in instances if not i.instance_status]
    assert [e.code for e in waiting.last_attempt.errors.errors] == ["ZONE_RESOURCE_POOL_EXHAUSTED"]
    assert f"zones/{REGION}-b'" in waiting.last_attempt.errors.errors[0].message
    compact.advance(60)
    assert by_state(compact.instances(mig=mig)) == {("NONE", "RUNNING"): 2, ("CREATING", ""): 1}


def test_without_compact_the_same_resize_spreads_over_every_zone_with_room(cloud):
    spread, mig = cloud(compact=False)
    assert spread.migs.get(**spread.kw(mig)).distribution_policy.target_shape == "ANY"
    spread.resize(3, mig=mig)
    assert len(_zones(spread.instances(mig=mig))) == 3  # all placed, over more than one zone
    assert len(set(_zones(spread.instances(mig=mig)))) > 1


def _compact(machine_type: str, gpu_type: str, gpu_count: int) -> ZenConfig:
    return ZenConfig.model_validate({"project": PROJECT, "clusters": [
        {"name": "compact", **CLUSTER, "gpu_type": gpu_type, "gpu_count": gpu_count, "machine_type": machine_type,
         "compact": True}]})


def test_compact_is_refused_for_a_machine_family_gce_does_not_place_compactly():
    with pytest.raises(ValueError, match="compact: GCE places only a2, a3, a4, g2, g4 machine types compactly, "
                                         "not n1-standard-8"):
        _compact("n1-standard-8", "nvidia-tesla-t4", 1)
    with pytest.raises(ValueError, match="not a4x-highgpu-4g"):  # its MIG requires a workload policy
        _compact("a4x-highgpu-4g", "nvidia-gb200", 4)


@pytest.mark.parametrize("machine_type, gpu_type, gpus", [
    ("a2-highgpu-8g", "nvidia-tesla-a100", 8), ("g2-standard-48", "nvidia-l4", 4),
    ("g4-standard-48", "nvidia-rtx-pro-6000", 1), ("a3-edgegpu-8g", "nvidia-h100-80gb", 8),
    ("a3-highgpu-8g", "nvidia-h100-80gb", 8), ("a3-megagpu-8g", "nvidia-h100-mega-80gb", 8)])
def test_compact_is_taken_for_the_gpu_families_gce_places_close_together(machine_type, gpu_type, gpus):
    """G4 too (its MIGs take a compact placement policy, as A2's and G2's); A3 High of 8 GPUs and A3 Mega, whose
    MIGs GCE places with a workload policy, get their one zone (tests/terraform/test_terraform_gangs.py)."""
    assert _compact(machine_type, gpu_type, gpus).clusters[0].compact
