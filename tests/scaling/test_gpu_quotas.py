"""GPU quotas (issue 36): the Compute stand-in reports and enforces them as Compute does (regions.get,
projects.get, QUOTA_EXCEEDED), Zen reads them through the official client at most once per tick per
region, a pool no VM fits in is passed over without asking Compute, and `zen clusters` / `zen explain`
say that a quota, not capacity, holds a region back."""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Iterator

import pytest

from tests.messages import job_request
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.adapters.quotas import QuotaReader, QuotaUnread
from zen.app import Zen
from zen.core.quotas import ALL_REGIONS, Quota, gpu_metric, shortfall
from zen.scaling.manager import ClusterOrchestrator
from zen_dev.local.compute import ComputeStandIn, ManualClock as CloudClock

CLUSTER = "4xa100-40gb"  # 4 GPUs a VM; regions: us-central1, us-west1, europe-west4
# us-central1 has room for VMs but no A100 quota (for standard and spot VMs).
NO_A100_IN_CENTRAL = {"regions": {"us-central1": {"NVIDIA_A100_GPUS": 0, "PREEMPTIBLE_NVIDIA_A100_GPUS": 0}},
                      "all_regions": 12}


def test_quota_metrics_are_computes_names():
    assert gpu_metric("nvidia-l4", "standard") == "NVIDIA_L4_GPUS"
    assert gpu_metric("nvidia-l4", "spot") == "PREEMPTIBLE_NVIDIA_L4_GPUS"
    assert gpu_metric("nvidia-l4", "flex-start") == "PREEMPTIBLE_NVIDIA_L4_GPUS"
    assert gpu_metric("nvidia-tesla-a100", "standard") == "NVIDIA_A100_GPUS"
    assert gpu_metric("nvidia-h100-80gb", "spot") == "PREEMPTIBLE_NVIDIA_H100_GPUS"
    full = {"NVIDIA_L4_GPUS": Quota("NVIDIA_L4_GPUS", 8, 8)}
    assert shortfall("nvidia-l4", 1, "us-east4", ("standard",), full, {}).text() == (
        "GPU quota NVIDIA_L4_GPUS (us-east4) holds us-east4 back, not capacity: 8 of 8 GPUs in use, a VM needs 1")
    assert shortfall("nvidia-l4", 1, "us-east4", ("standard", "spot"), full, {}) is None  # spot's unknown
    assert shortfall("nvidia-l4", 1, "us-east4", ("spot",), full, {}) is None
    everywhere = {ALL_REGIONS: Quota(ALL_REGIONS, 4, 2)}
    assert shortfall("nvidia-l4", 4, "us-east4", ("spot",), {}, everywhere).scope == "all regions"


def test_a_cluster_that_lists_no_provisioning_is_held_back_by_the_standard_quota_alone(config):
    """Such a cluster is [standard] in terraform as in Zen (terraform/clusters.tf); it was held back only when
    the spot quota was full too (terraform's deprecated spot bool could have made its VMs spot)."""
    from zen.scaling.pricing import cluster_pools
    from zen.scaling.quotas import held_back

    cluster = config.cluster(CLUSTER)
    assert "provisioning" not in cluster.model_fields_set and list(cluster.provisioning) == ["standard"]
    full = {"us-central1": {"NVIDIA_A100_GPUS": Quota("NVIDIA_A100_GPUS", 8, 8)}}
    assert list(held_back(cluster, cluster_pools(cluster), full)) == ["us-central1"]


@contextmanager
def quota_standin(config, monkeypatch, log_dir, quotas: dict, capacity: int = 4) -> Iterator[ComputeStandIn]:
    """The Compute stand-in serving ``quotas`` (and ``capacity`` VMs a zone), the official clients pointed at it."""
    scenario = {"project": config.project, "seed": 2, "capacity": {"default": capacity},
                "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0},
                "gpu_quotas": quotas}
    running = ComputeStandIn(scenario, clock=CloudClock(), config=config, log_dir=log_dir).start()
    try:
        monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", running.endpoint)
        yield running
    finally:
        running.stop()


@pytest.fixture
def standin(config, clock, monkeypatch, tmp_path):
    with quota_standin(config, monkeypatch, tmp_path, NO_A100_IN_CENTRAL) as running:
        yield running


def test_the_standin_reports_and_enforces_gpu_quotas_through_the_official_client(standin, config):
    reader = QuotaReader(config.project)
    central = reader.region("us-central1")
    assert central["NVIDIA_A100_GPUS"] == Quota("NVIDIA_A100_GPUS", 0.0, 0.0)
    assert central["PREEMPTIBLE_NVIDIA_L4_GPUS"].limit == 1000  # the default for a metric not listed
    assert reader.project_wide()[ALL_REGIONS] == Quota(ALL_REGIONS, 12.0, 0.0)
    assert reader.api_calls == 2
    reader.region("us-central1")
    assert reader.api_calls == 2  # kept a minute
    # A VM asked for where the quota is full is refused with Compute's QUOTA_EXCEEDED; one that fits runs
    clients = compute_clients_from_env()
    for region in ("us-central1", "us-west1"):
        MigManager(config.project, region, config.cluster(CLUSTER).mig_name(region), *clients).resize(1)
    standin.advance(61)
    central_mig = MigManager(config.project, "us-central1", config.cluster(CLUSTER).mig_name("us-central1"), *clients)
    refused = central_mig.errors()  # (retried every 30 cloud seconds)
    assert refused and {e.kind.value for e in refused} == {"QUOTA"}
    fresh = QuotaReader(config.project)
    assert fresh.region("us-west1")["PREEMPTIBLE_NVIDIA_A100_GPUS"].usage == 4.0
    assert fresh.project_wide()[ALL_REGIONS].usage == 4.0
    with pytest.raises(QuotaUnread, match="could not read the GPU quotas of project nope"):
        QuotaReader("nope").project_wide()


def test_a_region_without_quota_is_passed_over_and_the_decision_says_why(standin, config, db, publisher, clock,
                                                                         capsys):
    from zen_dev.local.invoke import FunctionsInvoker

    clients = compute_clients_from_env()
    reader = QuotaReader(config.project)
    scaler = ClusterOrchestrator(config, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients),
                                 quotas=reader)
    fn = FunctionsInvoker(Zen(config, db, publisher, clock, scaler=scaler))
    fn.tick()  # reads the quotas: one call per region the clusters use, and one for the project
    regions = {r for c in config.clusters for r in c.regions}
    assert reader.api_calls == len(regions) + 1
    fn.submit(job_request("a", cluster=CLUSTER))
    assert reader.api_calls == len(regions) + 1  # the submission's pass reads none
    fn.tick()
    assert reader.api_calls == 2 * (len(regions) + 1)  # each tick reads afresh (the room is counted against the VMs
    # listed then: a kept answer was counted against VMs made since, zen.scaling.quotas)

    def instances(region):
        return MigManager(config.project, region, config.cluster(CLUSTER).mig_name(region), *clients).instances()

    assert instances("us-central1") == []  # never asked: it would be refused
    assert len(instances("us-west1")) == 1
    with db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
    [block] = [d for d in decisions if d["action"] == "BLOCK"]
    assert block["region"] == "us-central1"
    assert block["reason"].startswith("GPU quota NVIDIA_A100_GPUS (us-central1) holds us-central1 back, not capacity")
    # zen explain JOB says so while the job waits, whatever the cluster decided since
    from zen.cli.queues import explain_job

    capsys.readouterr()
    assert explain_job("a", False, db) == 0
    assert ("GPU quota NVIDIA_A100_GPUS (us-central1) holds us-central1 back, not capacity: 0 of 0 GPUs in use"
            in capsys.readouterr().out)


def test_zen_clusters_and_explain_say_a_quota_holds_a_region_back(standin, config, db_url, monkeypatch, capsys):
    from zen.cli.main import main

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.setenv("ZEN_PROJECT", config.project)
    assert main(["clusters"]) == 0
    out = capsys.readouterr().out
    assert "GPU quotas (Compute's, read now" in out
    line = next(line for line in out.splitlines() if line.startswith(CLUSTER) and "us-central1" in line
                and "NVIDIA_A100_GPUS" in line)
    assert "0/0" in line and "holds it back" in line
    assert main(["clusters", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    [a100] = [r for r in rows if r["cluster"] == CLUSTER]
    assert a100["quota_held_back"]["us-central1"].startswith("GPU quota NVIDIA_A100_GPUS (us-central1)")
    assert main(["explain", CLUSTER]) == 0
    assert "GPU quota NVIDIA_A100_GPUS (us-central1) holds us-central1 back, not capacity" in capsys.readouterr().out


def test_a_quota_short_of_a_regions_worth_of_vms_gets_no_spare_boot(config, db, publisher, clock, monkeypatch,
                                                                     tmp_path):
    # A spare refused QUOTA_EXCEEDED would strike its pool: a job races one only where the last quota read
    # left room for max_vms_per_region of the cluster's VMs. The tick reads the quotas in one instance; the
    # submission's pass runs in another (as Cloud Functions do) and goes by the pools' memory.
    from zen.store.prices import current
    from zen_dev.local.invoke import FunctionsInvoker

    def prices():  # as production's: the snapshot's, the catalog's kept in Postgres, the overrides
        with db.transaction() as session:
            return current(session, config.pricing)

    cluster = config.cluster(CLUSTER)
    worth = cluster.max_vms_per_region * cluster.gpu_count
    for gpus, expected in ((worth - cluster.gpu_count, 1), (worth, 2)):
        quotas = {"regions": {r: {"NVIDIA_A100_GPUS": gpus, "PREEMPTIBLE_NVIDIA_A100_GPUS": gpus}
                              for r in cluster.regions}, "all_regions": 1000}
        with quota_standin(config, monkeypatch, tmp_path / str(gpus), quotas):
            clients = compute_clients_from_env()

            def instance() -> Zen:
                scaler = ClusterOrchestrator(config, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients),
                                             prices=prices, quotas=QuotaReader(config.project))
                return Zen(config, db, publisher, clock, scaler=scaler)

            ticker, submitter = instance(), instance()
            FunctionsInvoker(ticker).tick()  # reads the quotas
            FunctionsInvoker(submitter).submit(job_request(f"spare-{gpus}", cluster=CLUSTER))
            for zen in (ticker, submitter):  # the sent marks now, not on a timer after the database is gone
                zen.relay.marks.flush()
            asked = {r: len(MigManager(config.project, r, cluster.mig_name(r), *clients).instances())
                     for r in cluster.regions}
            assert max(asked.values()) == expected, asked  # in the first choice (a hedge may go elsewhere)
