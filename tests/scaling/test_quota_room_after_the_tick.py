"""A cluster planned first in a tick is given the quota read's whole room (``zen.scaling.quotas.TickQuotas``); what the
clusters planned after it take of that room in the same tick is theirs. The first one's memory is held to what they
left (``TickQuotas.settle``): its passes between two ticks (a submission's) asked for the room they took, and Compute
refused those VMs with QUOTA_EXCEEDED."""

from __future__ import annotations

from tests.messages import job_request
from tests.scaling.test_quota_shared_by_clusters import shared_quotas
from zen.app import Zen
from zen.scaling.model import ErrorKind
from zen_dev.local.invoke import FunctionsInvoker

CENTRAL = "us-central1"


def test_a_submission_pass_of_the_cluster_planned_first_asks_not_for_the_room_a_later_cluster_took(
        config, db, publisher, clock, monkeypatch, tmp_path):
    # us-central1 has room for 16 A100 GPUs: the 8-GPU cluster's first VM, then the 4-GPU cluster's two.
    four, eight = config.cluster("4xa100-40gb"), config.cluster("8xa100-40gb")
    quotas = {"regions": {CENTRAL: {"NVIDIA_A100_GPUS": 16, "PREEMPTIBLE_NVIDIA_A100_GPUS": 16}}, "all_regions": 1000}
    with shared_quotas(config, db, clock, monkeypatch, tmp_path, quotas) as (scaler, instances):
        submitter = Zen(config, db, publisher, clock)  # no scaling at submission: the tick plans both clusters
        FunctionsInvoker(submitter).submit(job_request("eight-0", cluster=eight.name, priority=5))  # planned first
        for n in range(2):
            FunctionsInvoker(submitter).submit(job_request(f"four-{n}", cluster=four.name))
        ticker = Zen(config, db, publisher, clock, scaler=scaler)
        ticker.on_scale_tick()
        asked = {c.name: len(instances(c, CENTRAL)) for c in (four, eight)}
        assert asked == {eight.name: 1, four.name: 2}, asked  # 16 GPUs: the quota is full
        west = len(instances(eight, "us-west1"))
        for n in range(1, 3):  # a submission's pass, before the next tick
            FunctionsInvoker(ticker).submit(job_request(f"eight-{n}", cluster=eight.name, priority=5))
        for zen in (submitter, ticker):
            zen.relay.marks.flush()
        refused = [i.name for c in (four, eight) for i in instances(c, CENTRAL) if i.creation_error is ErrorKind.QUOTA]
        assert refused == [], refused  # none asked past the quota: no pool struck for it
        assert len(instances(eight, "us-west1")) > west  # the new jobs' VMs asked for in the next pool at once
