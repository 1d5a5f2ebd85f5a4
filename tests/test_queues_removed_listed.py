"""`zen queues` lists a queue removed from the configuration whose jobs still hold GPUs; it said ``you_may_submit:
yes`` of it (``may_submit`` answers None for a queue it does not know), while a submission to it is refused
("unknown queue"). It says no, and why."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from tests.test_queues import CLUSTER, statuses
from tests.test_queues_preemption import a100s, halves_config
from tests.test_queues_waiting import make

LAB = [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["alice"]},
       {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]}]


def test_a_removed_queue_is_not_said_to_take_submissions(config, db, db_url, publisher, clock, tmp_path):
    zen, functions = make(config, db, publisher, clock, LAB)
    functions.submit({**a100s("b0", 2, 0), "user_id": "bob", "queue": "team-b"})
    assert statuses(zen, "b0") == ["QUEUED"]
    removed = halves_config(config, [LAB[0]])
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(json.loads(removed.model_dump_json())))
    env = {"ZEN_CONFIG": str(path), "ZEN_DATABASE_URL": db_url, "PATH": "/usr/bin:/bin", "USER": "bob",
           "NO_GCE_CHECK": "True", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    done = subprocess.run([sys.executable, "-m", "zen.cli.main", "queues", "--json"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = {r["queue"]: r for r in json.loads(done.stdout)}
    assert rows["team-b"]["admitted_gpus"] == 2  # listed, as the commit meant
    assert rows["team-b"]["you_may_submit"] != "yes", rows["team-b"]
