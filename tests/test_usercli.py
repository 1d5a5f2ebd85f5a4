"""`zen submit`, `zen stop` and `zen watch` as a user runs them: through the official Pub/Sub client
to the stand-in, and against a real Postgres."""

from __future__ import annotations

import json

import pytest

from tests.messages import agent_run, job_request
from zen.cli.main import main


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
    said = capsys.readouterr().err  # it said "invalid job request: (message): give an image, a command ..."
    assert "submit: nothing to run: give a job file, a command after --" in said and "zen submit --help" in said
    assert user_env.on("zen-job-submitted") == []


def test_a_refusal_points_to_where_its_rule_is():
    from zen.cli.user import _where_to_look

    assert _where_to_look("regions ['asia-east1'] are not used by cluster 1xl4") == "see `zen clusters`"
    assert "queues.md#secrets" in _where_to_look(
        "secret DEMO: queue batch allows no reference projects/p/secrets/s/versions/1")
    assert _where_to_look("notify.0.webhook: the notifier reads only secrets named zen-notify-*") == \
        "see docs/how-to/notifications.md"
    assert _where_to_look("alice may not submit to queue prod") == "see `zen queues`"


def test_a_job_too_large_to_send_is_refused_naming_its_heaviest_field(user_env, capsys):
    """The refusal said "payload is N bytes; the limit is M (see `zen clusters`)", which shows no such limit: it names
    the limit, the field that weighs and what to do instead."""
    argv = ["submit", "--user", "alice", "--cluster", "1xl4", "--env", f"BLOB={'x' * 70_000}", "--", "python", "t.py"]
    assert main(argv) == 1
    said = capsys.readouterr().err
    assert "the limit is 65536 (limits.max_message_bytes; the heaviest: env 70" in said and "zen clusters" not in said
    assert "give large data as inputs" in said and user_env.on("zen-job-submitted") == []


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


def test_watch_into_a_pipe_writes_frames_without_control_codes(user_env, functions, capsys, monkeypatch):
    """``zen watch > file`` (or piped): frames one after the other, no clear-screen codes in the file."""
    from zen.cli import watch

    functions.submit(job_request("job-1"))
    capsys.readouterr()
    naps = []

    def nap(seconds):  # the second nap is Ctrl-C
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(watch.time, "sleep", nap)
    assert main(["watch", "--interval", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and out.count("VMs per region") == 2 and naps == [0.5, 0.5]


def test_clusters_shows_jobs_per_vm_and_the_execution_groups_by_region(tmp_path, monkeypatch, capsys):
    """What a user may ask for includes which regions are cleared for tagged jobs and how many jobs
    share a VM (issue 15)."""
    import yaml

    from zen.core.config import load_config

    raw = load_config().model_dump(mode="json")
    for cluster in raw["clusters"]:
        if cluster["name"] == "4xa100-40gb":
            cluster["region_tags"] = {"us-central1": ["hipaa"]}
            cluster["max_jobs_per_vm"] = 2
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    assert main(["clusters", "--json"]) == 0
    rows = {row["cluster"]: row for row in json.loads(capsys.readouterr().out)}
    assert (rows["4xa100-40gb"]["jobs_per_vm"], rows["4xa100-40gb"]["tags"]) == (2, "us-central1: hipaa")
    assert (rows["1xl4"]["jobs_per_vm"], rows["1xl4"]["tags"]) == (1, "")
    assert main(["clusters"]) == 0
    table = capsys.readouterr().out
    assert "JOBS_PER_VM" in table and "us-central1: hipaa" in table


@pytest.fixture
def nameless_uid(monkeypatch):
    """A container's uid: no $USER (nor LOGNAME...), and no passwd entry (pwd raises KeyError)."""
    import pwd

    for name in ("USER", "LOGNAME", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)


def test_submit_without_a_known_user_takes_user_or_asks_for_it(user_env, nameless_uid, capsys):
    """`zen submit --user bob` crashed with a KeyError from getpass.getuser: the default was computed
    although --user was given."""
    assert main(["submit", "--user", "bob", "--cluster", "1xl4", "--", "true"]) == 0
    [message] = user_env.on("zen-job-submitted")
    assert json.loads(message.data)["user_id"] == "bob"
    capsys.readouterr()
    assert main(["submit", "--cluster", "1xl4", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "cannot tell who you are" in err and "give --user NAME" in err and len(err.strip().splitlines()) == 1
    assert len(user_env.on("zen-job-submitted")) == 1


def test_submit_names_its_queue_with_a_flag(user_env, capsys, tmp_path, monkeypatch):
    """The flag the queue refusal points to (``zen submit --queue``): the request carries it. Without queues
    configured a job naming one is refused (docs/how-to/queues.md), not run outside the quota it was meant for."""
    import yaml

    from zen.core.config import load_config

    argv = ["submit", "--job-id", "q-1", "--user", "alice", "--cluster", "1xl4", "--queue", "team-a", "--",
            "python", "train.py"]
    assert main(argv) == 1 and "queue 'team-a': this Zen has no queues" in capsys.readouterr().err
    raw = load_config().model_dump(mode="json")
    raw["queues"] = [{"name": "team-a", "quota": {"1xl4": 4}}]
    (tmp_path / "zen.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("ZEN_CONFIG", str(tmp_path / "zen.yaml"))
    assert main(argv) == 0
    [message] = user_env.on("zen-job-submitted")
    assert json.loads(message.data)["queue"] == "team-a"
