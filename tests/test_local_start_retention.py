"""The local stack's start subscriptions (zen_dev.local.topology) keep a start message as long as terraform's do
(pubsub.tf: twice ``deadlines.start_republish_s``, within Pub/Sub's 10 minutes to 7 days). They set none, so the
stand-in kept every copy 7 days: copies terraform's subscriptions drop after the next republish piled up locally,
for the agents to pull and be told to RELEASE, and what the local stack showed was not what a deployment does."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.terraform.hcl import TERRAFORM, console
from zen.core.lease import start_retention_s
from zen_dev.local.topology import ensure_topology


@pytest.mark.parametrize("republish_s", [60, 3600, 302400])
def test_the_local_start_subscriptions_keep_a_start_as_long_as_terraforms(config, pubsub_clients, republish_s):
    config = config.model_copy(update={"deadlines": config.deadlines.model_copy(
        update={"start_republish_s": republish_s})})
    ensure_topology(config, *pubsub_clients)
    cluster = config.clusters[0]
    path = pubsub_clients[1].subscription_path(config.project,
                                               config.job_start_subscription(cluster.name, cluster.regions[0]))
    kept = pubsub_clients[1].get_subscription(subscription=path).message_retention_duration.total_seconds()
    assert kept == start_retention_s(republish_s) == max(2 * republish_s, 600), (kept, republish_s)


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_start_retention_is_terraforms_expression(tmp_path):
    """pubsub.tf's ``start_retention_s``, evaluated by terraform itself, is ``zen.core.lease.start_retention_s``."""
    expression = re.search(r"^  start_retention_s = (.*)$", (TERRAFORM / "pubsub.tf").read_text(), re.M).group(1)
    cases = [60, 300, 3600, 302400]
    (tmp_path / "main.tf").write_text("locals {\n  cases = %s\n}\n" % json.dumps(cases))
    result = console(tmp_path, "jsonencode([for r in local.cases : %s])"
                     % expression.replace("local.start_republish_s", "r"))
    assert result.returncode == 0, result.stderr
    assert json.loads(json.loads(result.stdout.strip().splitlines()[-1])) == [start_retention_s(r) for r in cases]
