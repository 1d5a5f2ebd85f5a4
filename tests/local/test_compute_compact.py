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


def test_compact_is_refused_for_a_machine_family_gce_does_not_place_compactly():
    with pytest.raises(ValueError, match="compact: GCE places only a2, a3, a4, g2 machine types compactly, "
                                         "not n1-standard-8"):
        ZenConfig.model_validate({"project": PROJECT, "clusters": [
            {"name": "1xt4", **CLUSTER, "gpu_type": "nvidia-tesla-t4", "gpu_count": 1,
             "machine_type": "n1-standard-8", "compact": True}]})
