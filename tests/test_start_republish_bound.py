"""``deadlines.start_republish_s`` is at most 6 days. Terraform keeps each start message twice that period in
its start subscription (pubsub.tf's ``start_retention_s``), and Pub/Sub keeps a message 7 days at most: with a longer
period than 7 days the retention was cut to 7 days, a queued job's start copies expired before the tick published them again,
and an agent that came up meanwhile found nothing to pull while the job waited, for up to the period less 7 days."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest
import yaml

from tests.terraform.hcl import Module, block, console
from zen.core.config import DEFAULT_CONFIG_PATH, load_config
from zen.core.errors import ConfigError

EIGHT_DAYS, FOUR_DAYS = 8 * 86400, 4 * 86400


def _config(tmp_path, republish_s):
    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    raw.setdefault("deadlines", {})["start_republish_s"] = republish_s
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_republish_period_longer_than_a_start_message_is_kept_is_refused_naming_the_field(tmp_path):
    with pytest.raises(ConfigError) as refused:
        load_config(_config(tmp_path, EIGHT_DAYS))
    assert "deadlines: start_republish_s=691200 is above 518400 (6 days)" in str(refused.value)
    for fine in (302400, FOUR_DAYS, 518400):  # kept twice it, 7 days at most: a day past a 6-day period
        assert load_config(_config(tmp_path, fine)).deadlines.start_republish_s == fine


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
@pytest.mark.parametrize("republish_s, holds", [(3600, True), (302400, True), (FOUR_DAYS, True), (518400, True), (EIGHT_DAYS, False)])
def test_terraform_refuses_a_configuration_whose_start_copies_would_expire_before_their_republish(
        tmp_path, republish_s, holds):
    """The job_start subscription's precondition, evaluated by terraform itself: it plans nothing else."""
    subscription = Module.load().resources_of("google_pubsub_subscription")["job_start"]
    [condition] = [block(p)["condition"] for p in block(subscription.get("lifecycle"))["precondition"]
                   if "start_republish_s" in block(p)["condition"]]
    (tmp_path / "main.tf").write_text(textwrap.dedent(f"""
        locals {{
          start_republish_s = {republish_s}
        }}
        """))
    result = console(tmp_path, f"jsonencode({condition[2:-1]})")
    assert result.returncode == 0, result.stderr
    assert json.loads(json.loads(result.stdout.strip().splitlines()[-1])) is holds
