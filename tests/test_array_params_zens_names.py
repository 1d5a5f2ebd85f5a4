"""An array's parameters go into its tasks' environment as ``env`` does, and are refused for the names ``env`` may
not take: MASTER_ADDR, MASTER_PORT, NNODES and NODE_RANK, which Zen sets for a gang's nodes
(``zen.core.gang_records.node_env``) over the task's own. A sweep over MASTER_PORT was accepted, and each node
of a gang task found Zen's port where its parameter was meant to be, with nothing said."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.test_arrays import jobs, refusals


@pytest.mark.parametrize("name", ["MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK"])
def test_an_arrays_params_may_not_name_a_variable_zen_sets(zen_and_fn, name):
    zen, fn = zen_and_fn
    fn.submit(job_request("single", nodes=2, env={name: "29500"}))
    assert jobs(zen, "single") == [None]
    assert f"{name}: names Zen sets itself" in refusals(zen)[-1]
    fn.submit(job_request("sweep", nodes=2, array={"params": [{"LR": "0.1"}, {"LR": "0.2", name: "29500"}]}))
    assert jobs(zen, "sweep-0", "sweep-1") == [None, None]
    assert f"array.params[1]: {name}: names Zen sets itself" in refusals(zen)[-1]
