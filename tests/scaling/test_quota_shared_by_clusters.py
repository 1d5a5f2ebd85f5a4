"""Clusters of one GPU type draw on the same GPU quotas (4xa100-40gb and 8xa100-40gb both on NVIDIA_A100_GPUS):
a tick plans them one after the other from one quota read, and what one cluster asks for there is no room for
the next (`zen.scaling.quotas.Read`)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from tests.messages import job_request
from tests.scaling.test_gpu_quotas import quota_standin
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.adapters.quotas import QuotaReader
from zen.app import Zen
from zen.scaling.manager import ClusterOrchestrator
from zen.scaling.model import ErrorKind
from zen_dev.local.invoke import FunctionsInvoker

CENTRAL = "us-central1"


@contextmanager
def shared_quotas(config, db, clock, monkeypatch, tmp_path, quotas: dict[str, Any]
                  ) -> Iterator[tuple[ClusterOrchestrator, Callable[[Any, str], list]]]:
    """The Compute stand-in with ``quotas``, a scale tick's orchestrator reading them, and the instances of a cluster's
    MIG in a region."""
    with quota_standin(config, monkeypatch, tmp_path, quotas):
        clients = compute_clients_from_env()
        scaler = ClusterOrchestrator(config, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients),
                                     quotas=QuotaReader(config.project))

        def instances(cluster, region):
            return MigManager(config.project, region, cluster.mig_name(region), *clients).instances()

        yield scaler, instances


def test_a_tick_asks_no_cluster_for_the_quota_room_another_cluster_took_in_that_tick(config, db, publisher, clock,
                                                                                    monkeypatch, tmp_path):
    # us-central1 has room for 8 A100 GPUs: two 4-GPU VMs, or one 8-GPU VM, not both.
    four, eight = config.cluster("4xa100-40gb"), config.cluster("8xa100-40gb")
    assert [c.name for c in config.clusters].index(four.name) < [c.name for c in config.clusters].index(eight.name)
    # (The stand-in counts a cluster that names no provisioning as spot, Zen as standard: both quotas are set.)
    quotas = {"regions": {CENTRAL: {"NVIDIA_A100_GPUS": 8, "PREEMPTIBLE_NVIDIA_A100_GPUS": 8}}, "all_regions": 1000}
    with shared_quotas(config, db, clock, monkeypatch, tmp_path, quotas) as (scaler, instances):
        submitter = Zen(config, db, publisher, clock)  # no scaling at submission: the tick plans both clusters
        for n in range(2):
            FunctionsInvoker(submitter).submit(job_request(f"four-{n}", cluster=four.name))
        FunctionsInvoker(submitter).submit(job_request("eight", cluster=eight.name))
        ticker = Zen(config, db, publisher, clock, scaler=scaler)
        report = ticker.on_scale_tick().scaling
        for zen in (submitter, ticker):
            zen.relay.marks.flush()
        asked = {c.name: {r: len(instances(c, r)) for r in c.regions} for c in (four, eight)}
        assert asked[four.name][CENTRAL] == 2, asked  # the first cluster planned takes the room
        assert asked[eight.name][CENTRAL] == 0, (asked, report[eight.name].decisions)  # none asked past the quota
        assert asked[eight.name]["us-west1"] == 1, asked  # its job's VM asked for in the next pool at once
        refused = [i.name for c in (four, eight) for r in c.regions for i in instances(c, r)
                   if i.creation_error is ErrorKind.QUOTA]
        assert refused == [], refused  # nothing Compute refused: no pool struck for it
