"""One refused ask of many one-node jobs' flex-start VMs (a request each) strikes the pool once: a read reported
(and deleted) at most FORGET_PER_READ of its FAILED requests, and those still unreported when the pool's first
block (3 minutes) ended struck it again though nothing had been asked since: blocked 3 + 6 minutes for one
refusal, its next strike starting at 12."""

from __future__ import annotations

from datetime import timedelta

from tests.scaling.test_flex_start_mig import (  # noqa: F401 - the fixture
    CLUSTER, NOW, PROJECT, cloud, flex_manager, requests_of,
)
from zen.core.config import ZenConfig, load_config
from zen.scaling.model import Action


def test_one_refused_ask_of_many_one_node_jobs_strikes_the_pool_once(cloud, monkeypatch):
    import tests.scaling.test_flex_start_mig as m

    big = {**CLUSTER, "max_vms_per_region": 20, "max_vms": 20}
    monkeypatch.setattr(m, "config", lambda: ZenConfig.model_validate(
        {**load_config().model_dump(), "project": PROJECT, "clusters": [big], "queues": []}))
    standin, flex, cluster = cloud(capacity=0)
    now = [NOW]
    manager, pool, fleet = flex_manager(cluster, flex, 20, now)
    made: set[str] = set()
    for minute in range(8):
        manager.run()
        with standin.world.lock:  # Compute refuses the first ask's requests (a quota), and only those
            for request in requests_of(standin, flex):
                if minute == 0:
                    made.add(request.name)
                    standin.world.resize_requests.fail(request, "QUOTA_EXCEEDED", "flex-start GPUs")
        now[0] += timedelta(minutes=1)
        standin.advance(60)
    assert made  # one request of 20 before c6c02a1, 20 of one since
    blocks = [d.reason for _, decisions in fleet.recorded for d in decisions if d.action is Action.BLOCK]
    assert len(blocks) == 1, blocks  # one refusal, one strike: asked again once its 3 minutes are over
