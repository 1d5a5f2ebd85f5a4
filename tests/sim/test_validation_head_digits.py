"""yamllines.problems_from_validation reads a model check's message head (``clusters.1: ...``) as a path, its ASCII
digit parts as list indices: a price table's key of another digit (``\u00b2``, for which str.isdigit() is True and
int() raises) is a key, and its problem a ScenarioError naming the line, not a bare ValueError."""

import pytest

from zen_dev.capacity.yamllines import ScenarioError
from zen_dev.sim.scenario import parse_scenario

TEXT = """description: t
seed: 1
clusters:
  - {name: a, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [us-central1], max_vms_per_region: 2, max_vms: 4}
zones:
  us-central1: [us-central1-a]
prices: {"us-central1": {spot: 1}, "\u00b2": {bogus: 1}}
capacity: {default: 3}
jobs: {kind: synthetic, count: 5, arrivals: {kind: poisson, rate_per_hour: 30}, duration: {dist: lognormal, median_s: 600, sigma: 0.5}}
"""


def test_a_superscript_digit_in_a_message_head_is_a_scenario_error():
    with pytest.raises(ScenarioError, match="unknown model 'bogus'"):
        parse_scenario(TEXT, source="sup.yaml", name="sup")
