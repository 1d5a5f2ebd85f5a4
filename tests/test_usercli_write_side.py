"""`zen submit` and `zen stop` against what Zen does with their messages (the CLI through ``zen.cli.main``, the
Pub/Sub stand-in, the real Postgres, the functions):

- `zen submit --job-id X`, X an array's id, said "submitted" and published a job the function refuses ("is an
  array's id"): nothing ran. It is refused before publishing.
- `--array-params` values reached the tasks as Python spelled what the YAML/JSON reader made of them: JSON `true`
  as `True`, `null` as `None`; YAML `010` as `8`, `1:30` as `90`. They go as the file writes them.
- An array whose publish failed (a timeout: it may have landed) said only "could not publish", with no id: run
  again, a second array ran every task twice. It names the array and the `--job-id` that retries it safely.
- `zen stop job-1,` (an id no job can have) said the stop is kept 7 days for a job "submitted with that id";
  with `--force` it printed a ValidationError. It says what a job_id is."""

from __future__ import annotations

import json

import pytest

from tests.messages import job_request
from zen.cli.main import main


@pytest.fixture
def user_env(config, publisher, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_PROJECT", config.project)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.setenv("USER", "alice")
    return publisher


def test_a_job_id_that_is_an_arrays_id_is_refused_before_publishing(user_env, functions, zen, capsys):
    functions.submit(job_request("sweep", user_id="alice", cluster="1xl4", array={"count": 3}))
    capsys.readouterr()
    code = main(["submit", "--job-id", "sweep", "--cluster", "1xl4", "--", "python", "eval.py"])
    out, err = capsys.readouterr()
    assert (code, user_env.on("zen-job-submitted")) == (1, []), (code, out, err)
    assert "submitted sweep" not in out and "is an array's" in err, err


@pytest.mark.parametrize("name, text, written", [
    ("params.json", '[{"USE_AMP": true, "OPTIMIZER": null, "LR": 1e-5}]',
     {"USE_AMP": "true", "OPTIMIZER": "null", "LR": "1e-5"}),
    ("params.yaml", "- {SEED: 010, WARMUP: 1:30, AMP: yes}\n", {"SEED": "010", "WARMUP": "1:30", "AMP": "yes"}),
])
def test_array_params_reach_the_tasks_as_written(user_env, tmp_path, name, text, written):
    params = tmp_path / name
    params.write_text(text)
    assert main(["submit", "--job-id", "sweep", "--array-params", str(params), "--cluster", "1xl4", "--",
                 "python", "train.py"]) == 0
    [message] = user_env.on("zen-job-submitted")
    assert json.loads(message.data)["array"]["params"][0] == written


def test_a_failed_array_publish_names_the_array_and_how_to_try_again(monkeypatch, capsys):
    from zen.cli import user as usercli
    from zen.cli.kit import CliError

    def times_out(topic_field, payload, attributes=None):
        raise CliError("could not publish to projects/p/topics/zen-job-submitted: TimeoutError")

    monkeypatch.setattr(usercli, "publish", times_out)
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:9")  # a local stack's (the job needs no image there)
    monkeypatch.delenv("ZEN_DATABASE_URL", raising=False)
    monkeypatch.delenv("ZEN_CLOUDSQL_INSTANCE", raising=False)
    assert main(["submit", "--array", "3", "--cluster", "1xl4", "--", "true"]) == 1
    err = capsys.readouterr().err
    assert "may have been published all the same" in err and "--job-id " in err, err


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_a_stop_of_an_id_no_job_can_have_says_what_a_job_id_is(user_env, capsys, force):
    assert main(["stop", *force, "job-1,"]) == 2
    err = capsys.readouterr().err
    assert user_env.on("zen-job-stop") == []
    assert "job_id must be" in err and "ValidationError" not in err and "a job submitted with that id" not in err, err
