"""Where pools are priced, a demand group's pools are compared by their price plus the egress its jobs' inputs cost read
in each pool's region (``DemandGroup.egress``, priced by ``zen.scaling.egress`` at the rates ``zen explain`` uses),
over the run expected (``Ranking.run_s``). The cheapest pool within ``cost_slack_s`` won on its VM price alone: a job
reading 2 TB from europe-west4 was asked a VM in us-central1 for $0.24/h less, and paid $160 to read its data across
the ocean. A group whose jobs name no input ranks as before."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone

from zen.core.config import load_config, ZenConfig
from zen.scaling.fleetdb import demand_groups
from zen.scaling.model import ClusterLimits, DemandGroup, Pool, RegionMemory, Timing
from zen.scaling.planner import ZenPlanner

from tests.scaling.test_planner import at, snap, trusted

POOLS = {"europe-west4": Pool("europe-west4", "spot", 2.61), "us-central1": Pool("us-central1", "spot", 2.37)}
LIMITS = ClusterLimits("8xa100", tuple(POOLS), max_vms_per_region=4, max_vms=8, pools=POOLS)
NEAR_DATA = ("europe-west4", "us-central1")  # the job's regions ordered by its data (zen.core.locality)
TWO_TB = (("europe-west4", 0.0), ("us-central1", 160.0))  # 2,000 GB x $0.08/GB across the ocean


def asked(group: DemandGroup, memory=None) -> dict[str, str]:
    result = ZenPlanner().plan(replace(snap(0, memory=memory or trusted(LIMITS.regions), limits=LIMITS,
                                            timing=Timing()), demand=(group,)))
    return {d.region: d.reason for d in result.decisions
            if d.action.value == "ADD" and "queued job(s) without a VM" in d.reason}


def test_a_slightly_dearer_pool_near_two_terabytes_of_input_beats_a_cheaper_one_across_the_ocean():
    reasons = asked(DemandGroup(NEAR_DATA, 1, at(0), egress=TWO_TB))
    assert list(reasons) == ["europe-west4"], reasons
    assert reasons["europe-west4"].startswith(
        "1 queued job(s) without a VM: $2.61/h (spot) + $0.00 egress (its inputs' egress weighed against an expected "
        "1.0 h run), before us-central1 $2.37/h (spot) + $160.00 egress"), reasons


def test_without_inputs_the_cheapest_vm_wins_as_before():
    reasons = asked(DemandGroup(NEAR_DATA, 1, at(0)))
    assert list(reasons) == ["us-central1"], reasons
    assert reasons["us-central1"].startswith("1 queued job(s) without a VM: $2.37/h (spot), before europe-west4 "
                                             "$2.61/h (spot)"), reasons


def test_runs_long_enough_make_the_cheaper_vm_worth_its_egress():
    """Runs of 1,000 h learned in its pools: $0.24/h x 1,000 h is more than the $160 of egress."""
    memory = {pool: replace(m, run_s=1000 * 3600.0) for pool, m in trusted(LIMITS.regions).items()}
    assert list(asked(DemandGroup(NEAR_DATA, 1, at(0), egress=TWO_TB), memory)) == ["us-central1"]
    memory = {pool: replace(m, run_s=100 * 3600.0) for pool, m in memory.items()}  # $24 of VM: not worth $160
    assert list(asked(DemandGroup(NEAR_DATA, 1, at(0), egress=TWO_TB), memory)) == ["europe-west4"]


def located() -> ZenConfig:
    raw = json.loads(load_config().model_dump_json())
    raw["data"] = {"bucket_locations": {"eu-data": "europe-west4"}}
    return ZenConfig.model_validate(raw)


def test_a_groups_egress_is_its_jobs_inputs_priced_per_job():
    """Two jobs of one group, one reading 2,000 GB and one nothing: each VM's job costs $80 on average from
    us-central1 (the sum over the group's jobs, divided by them); a row without inputs is not priced."""
    config = located()
    cluster = config.cluster("8xa100-40gb")
    oldest = datetime(2026, 12, 1, tzinfo=timezone.utc)
    row = {"priority": 0, "regions": ["europe-west4", "us-central1"], "jobs": 2, "oldest": oldest,
           "inputs": [[{"uri": "gs://eu-data/shards/", "size_gb": 2000}]]}
    [group] = demand_groups([row], cluster, config)
    assert dict(group.egress) == {"europe-west4": 0.0, "us-central1": 80.0}, group
    [plain] = demand_groups([{**row, "inputs": None}], cluster, config)
    assert plain.egress == () and plain == replace(group, egress=())
    assert demand_groups([row], cluster) == (plain,)  # no configuration to price it with
