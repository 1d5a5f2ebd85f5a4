"""`zen submit` of a job with several acceptable GPU shapes (`gpu_types: [...]` with `gpu_count`).

The function chooses the shape at submission: the first whose queue has quota free and whose regions are not
all stocked out, else the first (zen.jobs.placement.choose; docs/how-to/queues.md, "Several GPU shapes"). The CLI
printed "submitted ID to cluster <the first shape's> (regions <its regions>)", so when the first shape's quota
was full it named a cluster and regions the job was not on. It names every candidate now, and that Zen chooses.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.messages import job_request
from zen.cli.main import main
from zen.core.config import load_config


@pytest.fixture
def config(project):
    raw = load_config().model_dump(mode="json")
    raw["project"] = project
    raw["queues"] = [{"name": "team", "quota": {"1xl4": 1, "4xa100-40gb": 4}, "users": ["alice"]}]
    return type(load_config()).model_validate(raw)


@pytest.fixture
def user_env(config, publisher, db_url, tmp_path, monkeypatch):
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    monkeypatch.setenv("ZEN_PROJECT", config.project)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.setenv("USER", "alice")
    return publisher


def test_submit_says_the_cluster_the_job_gets(user_env, functions, zen, tmp_path, capsys):
    functions.submit(job_request("holds-the-l4", user_id="alice", cluster="1xl4"))  # team's 1xl4 quota: full
    spec = tmp_path / "job.yaml"
    spec.write_text("job_id: either-1\ngpu_types: [nvidia-l4, nvidia-tesla-a100]\ngpu_count: 1\n"
                    "command: [python, train.py]\n")
    capsys.readouterr()
    assert main(["submit", str(spec)]) == 0
    out = capsys.readouterr().out
    [message] = user_env.on("zen-job-submitted")
    functions.submit(json.loads(message.data), message_id="cli-1")
    with zen.db.transaction() as session:
        from zen.store import repository

        job = repository.get_job(session, "either-1")
    assert job is not None and job.cluster == "4xa100-40gb"  # the function chose the shape with quota free
    assert "to cluster 1xl4 or 4xa100-40gb, the one Zen chooses" in out, out  # it said: "to cluster 1xl4 (regions ..."
