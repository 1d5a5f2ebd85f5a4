"""`zen` inside a running local stack's folder with a deployed Zen's ``ZEN_PROJECT`` set (as the deploy guide has
its users do) reaches that project, not the stack's emulators with that project's name: a submit there failed
"topic not found", blamed the stack, and said the job "may have been published all the same". A publish Pub/Sub
refuses outright (no such topic, no permission) sent nothing, and says so."""

from __future__ import annotations

import json
import os

import pytest

from zen.cli import main as climain
from zen.cli.main import main


def _stack_here(tmp_path, monkeypatch) -> None:
    """A running stack's record in this folder (this test's own process stands for its stand-ins)."""
    home = tmp_path / ".zen"
    home.mkdir()
    env = {"ZEN_PROJECT": "zen-local", "PUBSUB_EMULATOR_HOST": "127.0.0.1:9", "ZEN_DATABASE_URL": "postgresql://x@/zen"}
    (home / "stack.json").write_text(json.dumps({"env": env, "processes": [{"pid": os.getpid()}]}))
    monkeypatch.chdir(tmp_path)
    for key in env:
        monkeypatch.delenv(key, raising=False)


def test_a_deployed_project_named_inside_a_stacks_folder_is_reached_not_the_stack(tmp_path, monkeypatch):
    _stack_here(tmp_path, monkeypatch)
    monkeypatch.setenv("ZEN_PROJECT", "my-project")
    climain._use_local_stack()
    assert os.environ["ZEN_PROJECT"] == "my-project"
    assert "PUBSUB_EMULATOR_HOST" not in os.environ and "ZEN_DATABASE_URL" not in os.environ


@pytest.mark.parametrize("project", ["zen-local", None])
def test_the_stacks_own_project_or_none_talks_to_the_stack(tmp_path, monkeypatch, project):
    _stack_here(tmp_path, monkeypatch)
    if project:
        monkeypatch.setenv("ZEN_PROJECT", project)
    climain._use_local_stack()
    assert os.environ["PUBSUB_EMULATOR_HOST"] == "127.0.0.1:9" and os.environ["ZEN_PROJECT"] == "zen-local"


def test_a_publish_to_a_topic_that_does_not_exist_says_nothing_went_out(config, publisher, db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_PROJECT", "a-project-without-zen")  # the stand-in has no topics there: NotFound
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    code = main(["submit", "--job-id", "t-1", "--cluster", "1xl4", "--", "python", "t.py"])
    err = capsys.readouterr().err
    assert code == 1 and "could not publish to projects/a-project-without-zen/topics/zen-job-submitted" in err, err
    assert "may have been published" not in err, err
    assert publisher.on("zen-job-submitted") == []
