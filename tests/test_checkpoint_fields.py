"""A job's ``checkpoint:`` (zen.core.checkpoints): validated with errors that name the field, refused by a Zen
with no ``checkpoints.bucket``, carried to the agent by the start message with where the checkpoint lives;
``zen submit --checkpoint-every``."""

from __future__ import annotations

import json

import pytest
import yaml
from pydantic import ValidationError

from tests.messages import job_request
from zen.cli.main import main
from zen.core.checkpoints import CheckpointConfig
from zen.core.config import load_config
from zen.core.errors import ConfigError, describe_validation_error
from zen.core.models import JobRequest

BASE = {"user_id": "alice", "cluster": "4xa100-40gb", "command": ["python", "train.py"]}


@pytest.fixture
def config(project):
    return load_config().model_copy(update={"project": project,
                                            "checkpoints": CheckpointConfig(bucket="zen-ckpt", max_bytes=10**9)})


def test_a_checkpoint_is_kept_with_the_request_and_every_defaults_to_600():
    job = JobRequest.model_validate_json(json.dumps({**BASE, "checkpoint": {}}))
    assert job.checkpoint is not None and job.checkpoint.every == 600
    assert job.canonical("j")["checkpoint"] == {"every": 600}  # what jobs.request holds: request->'checkpoint'
    assert JobRequest.model_validate_json(json.dumps(BASE)).canonical("j").get("checkpoint") is None


@pytest.mark.parametrize("checkpoint, says", [
    ({"every": 5}, "checkpoint.every: Input should be greater than or equal to 30"),
    ({"every": "600"}, "checkpoint.every: Input should be a valid integer"),
    ({"every": 10**9}, "checkpoint.every: Input should be less than or equal to 604800"),
    ({"evry": 60}, "checkpoint.evry: Extra inputs are not permitted"),
    ("600", "checkpoint: Input should be an object"),
])
def test_a_bad_checkpoint_is_refused_naming_the_field(checkpoint, says):
    with pytest.raises(ValidationError) as raised:
        JobRequest.model_validate_json(json.dumps({**BASE, "checkpoint": checkpoint}))
    assert says in describe_validation_error(raised.value, model=JobRequest)


def test_the_configuration_checks_the_bucket(tmp_path):
    path = tmp_path / "zen.yaml"
    data = yaml.safe_load(load_config().model_dump_json())
    path.write_text(yaml.safe_dump({**data, "checkpoints": {"bucket": "Not_A_Bucket"}}))
    with pytest.raises(ConfigError, match="checkpoints.bucket"):
        load_config(path)


def test_the_start_message_says_where_the_checkpoint_lives(functions, publisher):
    functions.submit(job_request("ck-1", checkpoint={"every": 120}))
    [start] = [json.loads(m.data) for m in publisher.on("zen-job-start")]
    assert start["checkpoint"] == {"uri": "gs://zen-ckpt/checkpoints/4xa100-40gb/ck-1/", "every": 120,
                                   "max_bytes": 10**9}
    functions.submit(job_request("plain-1"))
    assert "checkpoint" not in [json.loads(m.data) for m in publisher.on("zen-job-start")][-1]


def test_submit_checkpoint_every(config, publisher, db_url, tmp_path, monkeypatch, capsys):
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    monkeypatch.setenv("ZEN_PROJECT", config.project)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    assert main(["submit", "--cluster", "4xa100-40gb", "--checkpoint-every", "300", "--", "python", "t.py"]) == 0
    [message] = publisher.on("zen-job-submitted")
    assert json.loads(message.data)["checkpoint"] == {"every": 300}
    assert main(["submit", "--cluster", "4xa100-40gb", "--checkpoint-every", "3", "--", "python", "t.py"]) == 2
    assert "checkpoint.every: Input should be greater than or equal to 30" in capsys.readouterr().err

    monkeypatch.delenv("ZEN_CONFIG")  # the default configuration: no checkpoints.bucket
    assert main(["submit", "--cluster", "4xa100-40gb", "--checkpoint-every", "300", "--", "python", "t.py"]) == 1
    err = capsys.readouterr().err
    assert "Zen would refuse this job: checkpoint: this Zen saves no checkpoints" in err
    assert "(see docs/how-to/checkpoints.md)" in err  # `zen clusters` says nothing of checkpoints
