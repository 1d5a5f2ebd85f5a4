"""`zen queues` (and the console's queues page) mark the queues the caller may submit to by membership: they asked
zen.jobs.authorization.may_submit with priority 0, so a queue whose max_priority is below 0 (a scavenger queue for
preemptible low-priority work) showed you_may_submit "no" to everyone, with why_not "priority 0 is above ...
max_priority", though every member may submit to it (at priority -1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from tests.test_queues import CLUSTER, with_queues
from zen.jobs.authorization import may_submit

QUEUES = [{"name": "scavenger", "quota": {CLUSTER: 8}, "max_priority": -1}]


def zen_queues_json(configured, db_url: str, tmp_path, user: str) -> list[dict]:
    """`zen queues --json` as ``user`` runs it, against ``configured`` written to a file and the test's database."""
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(json.loads(configured.model_dump_json())))
    env = {"ZEN_CONFIG": str(path), "ZEN_DATABASE_URL": db_url, "PATH": "/usr/bin:/bin", "USER": user,
           "NO_GCE_CHECK": "True", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    done = subprocess.run([sys.executable, "-m", "zen.cli.main", "queues", "--json"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_zen_queues_says_you_may_submit_to_a_queue_whose_max_priority_is_below_zero(config, db_url, tmp_path):
    configured = with_queues(config, QUEUES)
    assert may_submit(configured, "alice", "scavenger", -1) is None  # alice may submit to it (at priority -1)
    row = zen_queues_json(configured, db_url, tmp_path, "alice")[0]
    assert (row["you_may_submit"], row["why_not"]) == ("yes", None), row
