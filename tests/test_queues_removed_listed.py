"""`zen queues` lists a queue removed from the configuration whose jobs still hold GPUs; it said ``you_may_submit:
yes`` of it (``may_submit`` answers None for a queue it does not know), while a submission to it is refused
("unknown queue"). It says no, and why."""

from __future__ import annotations

from tests.test_queues import CLUSTER, statuses
from tests.test_queues_preemption import a100s, halves_config
from tests.test_queues_waiting import make
from tests.test_queues_you_may_submit_negative_max_priority import zen_queues_json

LAB = [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["alice"]},
       {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]}]


def test_a_removed_queue_is_not_said_to_take_submissions(config, db, db_url, publisher, clock, tmp_path):
    zen, functions = make(config, db, publisher, clock, LAB)
    functions.submit({**a100s("b0", 2, 0), "user_id": "bob", "queue": "team-b"})
    assert statuses(zen, "b0") == ["QUEUED"]
    removed = halves_config(config, [LAB[0]])
    rows = {r["queue"]: r for r in zen_queues_json(removed, db_url, tmp_path, "bob")}
    assert rows["team-b"]["admitted_gpus"] == 2  # listed
    assert rows["team-b"]["you_may_submit"] == "no", rows["team-b"]
    assert rows["team-b"]["why_not"] == "queue team-b is not in the configuration"
