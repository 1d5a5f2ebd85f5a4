"""``limits.max_runtime_s`` is bounded at load by what a job's ``max_runtime_s`` column holds (a Postgres integer):
a cap above 2**31-1 loaded, and then every job that names no max_runtime_s (it gets the cap) was refused at its
INSERT with "value out of range for type integer", naming no field."""

from __future__ import annotations

import pytest
import yaml

from zen.core.config import load_config
from zen.core.errors import ConfigError


def test_a_cap_above_what_a_job_row_holds_is_refused_at_load_naming_the_field(tmp_path):
    raw = load_config().model_dump(mode="json")
    raw["limits"]["max_runtime_s"] = 3_000_000_000
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises((ConfigError, ValueError), match=r"limits\.max_runtime_s"):
        load_config(path)
    raw["limits"]["max_runtime_s"] = 2**31 - 1
    path.write_text(yaml.safe_dump(raw))
    assert load_config(path).limits.max_runtime_s == 2**31 - 1
