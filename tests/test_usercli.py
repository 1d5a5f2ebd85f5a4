"""`zen submit`, `zen stop` and `zen watch` as a user runs them: through the official Pub/Sub client
to the stand-in, and against a real Postgres."""

from __future__ import annotations

import json

import pytest

from tests.messages import agent_run, job_request
from zen.cli import main


@pytest.fixture
def user_env(config, publisher, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_PROJECT", config.project)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return publisher


def test_submit_from_a_yaml_file_and_flags(user_env, tmp_path, capsys):
    spec = tmp_path / "job.yaml"
    spec.write_text("job_id: train-7\nuser_id: alice\ncluster: 1xl4\nlabels: {team: vision}\n")
    assert main(["submit", str(spec), "--priority", "5", "--env", "A=1", "--", "python", "train.py", "--lr", "3"]) == 0
    assert "submitted train-7" in capsys.readouterr().out
    [message] = user_env.on("zen-job-submitted")
    assert json.loads(message.data) == {
        "version": 1, "job_id": "train-7", "user_id": "alice", "cluster": "1xl4", "priority": 5,
        "command": ["python", "train.py", "--lr", "3"], "env": {"A": "1"}, "labels": {"team": "vision"}}


def test_submit_refuses_an_invalid_request_before_publishing(user_env, capsys):
    assert main(["submit", "--cluster", "1xl4"]) == 2  # neither image nor command
    assert "give an image, a command" in capsys.readouterr().err
    assert user_env.on("zen-job-submitted") == []


def test_stop_publishes_a_stop_request(user_env, capsys):
    assert main(["stop", "train-7", "--reason", "wrong data"]) == 1  # no such job: says so, sends nothing
    assert "no job train-7 is known" in capsys.readouterr().err and user_env.on("zen-job-stop") == []
    assert main(["stop", "--force", "train-7", "--reason", "wrong data"]) == 0
    [message] = user_env.on("zen-job-stop")
    assert json.loads(message.data) == {"version": 1, "job_id": "train-7", "reason": "wrong data"}


def test_watch_once_shows_jobs_and_vms(user_env, functions, capsys):
    functions.submit(job_request("job-1"))
    for beat in agent_run("job-1"):
        functions.heartbeat(beat)
    capsys.readouterr()
    assert main(["watch", "--once"]) == 0
    screen = capsys.readouterr().out
    assert "job-1" in screen and "SUCCEEDED" in screen and "VMs per region" in screen
