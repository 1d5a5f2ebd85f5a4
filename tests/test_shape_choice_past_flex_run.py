"""A job whose max_runtime_s outlasts a flex-start VM's run never uses the flex-start pools (``zen.scaling.fleetdb.
pools_of_row``, the claims' rule), so they leave it nothing where its other pools are blocked
(``zen.core.provisioning.blocked_for``): with every standard pool of a [standard, flex-start] cluster blocked, such a
job of several shapes is passed over to the next, not put where it can only wait."""

from __future__ import annotations

import json

import pytest

from tests.messages import job_request
from tests.test_shape_choice_by_pool import _block, _placed
from zen.core.config import ZenConfig

A100 = "4xa100-40gb"


@pytest.fixture
def flex(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        cluster["provisioning"] = ["standard", "flex-start"]
        cluster["flex_start_run_s"] = 3600
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def test_a_long_job_is_passed_over_where_every_pool_it_can_use_is_blocked(flex, clock):
    zen, functions = flex
    _block(zen, clock, zen.config.cluster(A100).regions)  # every standard pool; the flex-start ones it cannot use
    functions.submit(job_request("long", cluster=None, gpu_types=["nvidia-tesla-a100", "nvidia-l4"], gpu_count=1,
                                 provisioning="any", max_runtime_s=7200))
    cluster, reason = _placed(zen, "long")
    assert cluster == "1xl4" and "stocked out" in reason, (cluster, reason)
