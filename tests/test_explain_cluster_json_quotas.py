"""`zen explain CLUSTER` says which GPU quota holds a region back; its --json printed only the decision
rows, so a script reading it never learned that a quota (not capacity) kept the cluster out of a region.
Its JSON is an object: the decisions, the quotas holding pools back, and why quotas were not read."""

from __future__ import annotations

import json

from tests.scaling.test_gpu_quotas import CLUSTER, standin  # noqa: F401 (fixture: no A100 quota in us-central1)
from zen.cli.main import main


def test_explain_cluster_json_says_what_the_text_says_of_gpu_quotas(standin, config, db_url, monkeypatch,  # noqa: F811
                                                                   capsys):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.setenv("ZEN_PROJECT", config.project)
    assert main(["explain", CLUSTER]) == 0
    text = capsys.readouterr().out
    said = "GPU quota NVIDIA_A100_GPUS (us-central1) holds us-central1 back, not capacity"
    assert said in text

    assert main(["explain", CLUSTER, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert set(shown) == {"decisions", "quota_held_back", "quotas_unread"}, shown
    assert shown["quota_held_back"][CLUSTER]["us-central1"].startswith(said), shown
    assert shown["quotas_unread"] is None
