"""A scenario's price written `yes` (YAML 1.1's true) is refused naming the field, as production's ``pricing:``
refuses it: the scenario's and a cluster's ``prices`` were plain floats under pydantic's lax mode, which read it
as $1.00 per VM-hour."""

from __future__ import annotations

import pytest

from zen_dev.capacity.yamllines import ScenarioError
from zen_dev.sim.scenario import parse_scenario

SCENARIO = """
clusters:
  - {name: c4, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-central1, us-west1],
     max_vms_per_region: 4, max_vms: 8, provisioning: [spot]CLUSTER_PRICES}
TOP
"""


@pytest.mark.parametrize("top, cluster", [
    ("prices: {us-central1: {spot: yes}, us-west1: {spot: 2.0}}", ""),
    ("", ", prices: {us-central1: {spot: 2.0}, us-west1: {spot: true}}"),
])
def test_a_boolean_price_is_refused_naming_the_field(top, cluster):
    text = SCENARIO.replace("TOP", top).replace("CLUSTER_PRICES", cluster)
    try:
        scenario = parse_scenario(text, source="s.yaml")
    except ScenarioError as exc:
        assert "prices" in str(exc)
        return
    raise AssertionError(f"accepted: the table read as {scenario.clusters[0].table}")
