"""The tick reads every MIG before it takes any cluster's lock; a pass that plans a cluster in between
(a submission on another function instance) changes MIGs the tick's states do not show. The tick's
pass must not plan or cap the cluster from those states: it reads them again, and apply counts the
cluster's VMs from the target sizes it reads itself."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_manager_apply import NOW, REGIONS, Fixed, applied, running
from tests.scaling.test_scaling_integration import CLUSTER, stack  # noqa: F401 - the fixture
from zen.core.config import ClusterConfig, load_config
from zen.scaling.manager import ClusterManager, ClusterOrchestrator
from zen.scaling.model import Plan, Timing
from zen.scaling.port import FleetFacts, MigState


@pytest.fixture
def config(project):
    config = load_config().model_copy(update={"project": project})
    clusters = [c.model_copy(update={"max_vms": 2}) if c.name == CLUSTER else c for c in config.clusters]
    return config.model_copy(update={"clusters": clusters})


def test_a_submission_pass_between_the_tick_s_reads_and_its_pass_is_seen(stack, monkeypatch):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    regions = ["us-west1", "europe-west4"]
    real_scale = ClusterOrchestrator.scale
    between = {}

    def scale(self, cluster, states=None, *rest):
        if states is not None and cluster == CLUSTER and not between:
            # Another instance's submission lands after the tick read the MIGs (its own pass reads fresh).
            fn.submit(job_request("a", regions=regions))
            between.update({r: len(instances(r)) for r in regions})
        return real_scale(self, cluster, states, *rest)

    monkeypatch.setattr(ClusterOrchestrator, "scale", scale)
    zen.scaler.tick()
    sizes = {r: len(instances(r)) for r in regions}
    assert sum(between.values()) == 2  # the submission's pass: one VM and its hedge
    assert sizes == between  # the tick asked for nothing more: the job has its VMs


class StaleMig(RecordingMig):
    """A MIG whose reads lag what ``target_size`` says (resized by someone since)."""

    def read(self, since=None, summary=None):
        self.calls.append(("read", self.region))
        return MigState(0, [], [])


def test_the_cluster_cap_counts_the_targets_read_at_apply_time():
    calls: list = []
    idle = {"state": "IDLE", "idle_since": NOW, "last_seen_at": NOW}
    migs = {"us-central1": RecordingMig("us-central1", calls, 2, [running("a"), running("b")]),
            "us-west1": StaleMig("us-west1", calls, 2)}  # 2 VMs asked since the read
    fleet = FakeFleet(FleetFacts((), {}, {"a": idle, "b": idle}, {}, 0), NOW)
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=REGIONS,
                           max_vms_per_region=4, max_vms=4)
    m = ClusterManager(config, fleet, migs, lambda: NOW, Timing(), Fixed(Plan(add={"us-central1": 2})))
    report = m.run()
    assert applied(calls) == [] and report.added == {}  # 2 + 2 VMs: the cluster is at its cap
