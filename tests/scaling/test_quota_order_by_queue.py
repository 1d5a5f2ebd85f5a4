"""Clusters sharing a GPU quota are planned in the order of their most urgent queued job (highest priority, then
oldest), not in the configuration's: planned in that order, the cluster listed first took a short quota's room at
every tick, and an older job of higher priority of a cluster listed after it waited while the first cluster's newer
jobs of lower priority got VMs (`zen.scaling.manager.ClusterOrchestrator.tick`)."""

from __future__ import annotations

from tests.messages import job_request
from tests.scaling.test_gpu_quotas import quota_standin
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.adapters.quotas import QuotaReader
from zen.app import Zen
from zen.scaling.manager import ClusterOrchestrator
from zen_dev.local.invoke import FunctionsInvoker

CENTRAL = "us-central1"


def test_a_short_quota_goes_to_the_cluster_whose_queued_job_outranks_not_to_the_one_listed_first(
        config, db, publisher, clock, monkeypatch, tmp_path):
    # us-central1 alone has A100 quota, room for 8 GPUs: two 4-GPU VMs, or one 8-GPU VM, not both.
    four, eight = config.cluster("4xa100-40gb"), config.cluster("8xa100-40gb")
    names = [c.name for c in config.clusters]
    assert names.index(four.name) < names.index(eight.name)  # the 4-GPU cluster is listed first
    none = {"NVIDIA_A100_GPUS": 0, "PREEMPTIBLE_NVIDIA_A100_GPUS": 0}
    quotas = {"regions": {CENTRAL: {"NVIDIA_A100_GPUS": 8, "PREEMPTIBLE_NVIDIA_A100_GPUS": 8},
                          "us-west1": none, "europe-west4": none}, "all_regions": 1000}
    with quota_standin(config, monkeypatch, tmp_path, quotas):
        clients = compute_clients_from_env()
        scaler = ClusterOrchestrator(config, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients),
                                     quotas=QuotaReader(config.project))
        submitter = Zen(config, db, publisher, clock)  # no scaling at submission: the tick plans both clusters
        FunctionsInvoker(submitter).submit(job_request("eight", cluster=eight.name, priority=10))
        clock.advance(600)  # the 4-GPU cluster's jobs come later, at a lower priority
        for n in range(2):
            FunctionsInvoker(submitter).submit(job_request(f"four-{n}", cluster=four.name))
        ticker = Zen(config, db, publisher, clock, scaler=scaler)
        report = ticker.on_scale_tick().scaling
        for zen in (submitter, ticker):
            zen.relay.marks.flush()

        asked = {c.name: len(MigManager(config.project, CENTRAL, c.mig_name(CENTRAL), *clients).instances())
                 for c in (four, eight)}
        assert asked[eight.name] == 1, (asked, report[eight.name].decisions)  # the older job of higher priority
        assert asked[four.name] == 0, (asked, report[four.name].decisions)  # no room left after it
        assert list(report) == names  # reported in the configuration's order all the same


def test_clusters_are_ranked_by_priority_then_age_those_without_queued_jobs_last_in_the_configurations_order(config):
    from datetime import datetime, timezone

    from zen.scaling.quotas import planning_order

    names = [c.name for c in config.clusters]
    assert len(names) >= 3, names
    first, second, third = names[:3]
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    later = at.replace(hour=1)
    order = planning_order(config.clusters, lambda asked: {second: (0, later), third: (0, at)})
    assert [c.name for c in order][:3] == [third, second, first], order  # the older job first; none queued: last
    order = planning_order(config.clusters, lambda asked: {second: (5, later), third: (0, at)})
    assert [c.name for c in order][:2] == [second, third], order  # a higher priority before an older job
    assert [c.name for c in planning_order(config.clusters, None)] == names  # no quotas read: as configured

    def unread(asked):
        raise RuntimeError("the database is away")

    assert [c.name for c in planning_order(config.clusters, unread)] == names
