"""A job's ``secrets`` through the functions, against a real Postgres: bad references, too many, a clash
with ``env`` and a reference its queue (or, without queues, the configuration) does not allow are
rejected with the reason, recorded and acked; an allowed one is stored as the reference alone and
reaches the agent in the start message."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.messages import job_request
from tests.test_bad_input import rejected_events, snapshot
from tests.test_queues import CLUSTER, with_queues
from zen.core.config import ZenConfig
from zen.cli.main import main
from zen.core.errors import ConfigError
from zen.store import repository

HF = "projects/my-project/secrets/hf-token/versions/latest"
QUEUES = [{"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"],
           "secrets": ["projects/my-project/secrets/hf-*/versions/*"]},
          {"name": "batch", "quota": {CLUSTER: 8}, "users": ["bob"]}]
# A regional secret's version (data kept in one location), and queues whose research allows those of its project.
REGIONAL = "projects/my-project/locations/europe-west4/secrets/hf-token/versions/latest"
RESIDENT = [{**QUEUES[0], "secrets": ["projects/my-project/locations/europe-west4/secrets/hf-*/versions/*"]}]


def submitted_functions(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(config, db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def assert_rejected(functions, zen, publisher, request: dict, reason: str) -> None:
    response = functions.send("on_job_submitted", json.dumps(request).encode(), message_id="m-1")
    assert response.status_code == 200  # acked
    jobs, history, rejected = snapshot(zen)
    assert jobs == [] and history == []
    assert len(rejected) == 1 and reason in rejected[0]["reason"], rejected
    [event] = rejected_events(publisher)
    assert event["type"] == "job.rejected" and reason in event["reason"]


BAD_SECRETS = [
    ({"HF_TOKEN": "hf-token"}, "secrets: HF_TOKEN: its value (not quoted: it may be the secret itself) is not a Secret "
                               "Manager secret version: give projects/<project>/secrets/<name>/versions/<version "
                               "number or latest>"),
    ({"HF_TOKEN": "projects/my-project/secrets/hf-token"}, "HF_TOKEN: 'projects/my-project/secrets/hf-token' is not"),
    ({"HF_TOKEN": "projects/my-project/secrets/hf token/versions/1"}, "is not a Secret Manager secret version"),
    ({"HF_TOKEN": "projects/my-project/secrets/../versions/1"}, "is not a Secret Manager secret version"),
    ({"HF_TOKEN": "projects/my-project/locations/us/secrets/x/versions/1"}, "is not a Secret Manager secret version"),
    ({"1TOKEN": HF}, "secrets.1TOKEN.[key]: String should match pattern"),  # env's own rule for names
    ({"HF-TOKEN": HF}, "secrets.HF-TOKEN.[key]: String should match pattern"),
    ({f"T{n}": HF for n in range(17)}, "secrets: at most 16 secrets per job (17 given)"),
    ({"HF_TOKEN": 42}, "secrets.HF_TOKEN: Input should be a valid string"),
]


@pytest.mark.parametrize("secrets, reason", BAD_SECRETS, ids=[r for _, r in BAD_SECRETS])
def test_a_bad_secret_is_rejected_naming_the_field(functions, zen, publisher, secrets, reason):
    assert_rejected(functions, zen, publisher, job_request("j", secrets=secrets), reason)


def test_a_secret_also_in_env_is_rejected_naming_both(functions, zen, publisher):
    assert_rejected(functions, zen, publisher, job_request("j", env={"HF_TOKEN": "x"}, secrets={"HF_TOKEN": HF}),
                    "secrets: HF_TOKEN also in env: name each variable in env or in secrets, not both")


def test_without_queues_no_secret_is_allowed_by_default(functions, zen, publisher):
    assert_rejected(functions, zen, publisher, job_request("j", secrets={"HF_TOKEN": HF}),
                    f"secret HF_TOKEN: this Zen (it has no queues) allows no reference {HF} (its secrets: none;")


def test_a_queue_refuses_a_reference_it_does_not_allow(config, db, publisher, clock, db_url, monkeypatch):
    zen, functions = submitted_functions(with_queues(config, QUEUES), db, publisher, clock, db_url, monkeypatch)
    other = "projects/my-project/secrets/db-password/versions/1"
    assert_rejected(functions, zen, publisher, job_request("j", secrets={"HF_TOKEN": HF, "DB": other}),
                    f"secret DB: queue research allows no reference {other} "
                    "(its secrets: ['projects/my-project/secrets/hf-*/versions/*'])")


def test_a_queue_without_secrets_allows_none(config, db, publisher, clock, db_url, monkeypatch):
    zen, functions = submitted_functions(with_queues(config, QUEUES), db, publisher, clock, db_url, monkeypatch)
    assert_rejected(functions, zen, publisher, job_request("j", user_id="bob", secrets={"HF_TOKEN": HF}),
                    f"secret HF_TOKEN: queue batch allows no reference {HF}")


def test_a_wildcard_stays_within_its_part(config, db, publisher, clock, db_url, monkeypatch):
    """``hf-*`` allows secrets named hf-..., never another project's (``*`` does not cross a slash)."""
    queues = [{**QUEUES[0], "secrets": ["projects/my-*/secrets/hf-*/versions/*"]}]
    zen, functions = submitted_functions(with_queues(config, queues), db, publisher, clock, db_url, monkeypatch)
    elsewhere = "projects/my-project/secrets/x/versions/1"
    assert_rejected(functions, zen, publisher, job_request("j", secrets={"T": elsewhere}),
                    f"secret T: queue research allows no reference {elsewhere}")


@pytest.mark.parametrize("queues, reference", [(QUEUES, HF), (RESIDENT, REGIONAL)], ids=["global", "regional"])
def test_an_allowed_reference_is_stored_as_the_reference_and_reaches_the_start(
        config, db, publisher, clock, db_url, monkeypatch, queues, reference):
    zen, functions = submitted_functions(with_queues(config, queues), db, publisher, clock, db_url, monkeypatch)

    functions.submit(job_request("j", secrets={"HF_TOKEN": reference}))

    with zen.db.transaction() as session:
        job = repository.get_job(session, "j")
    assert job.status.value == "QUEUED" and job.request["secrets"] == {"HF_TOKEN": reference}
    [start] = [json.loads(m.data) for m in publisher.on("zen-job-start")]
    assert start["secrets"] == {"HF_TOKEN": reference} and "HF_TOKEN" not in start["env"]


def test_without_queues_the_top_level_secrets_allow_references(config, db, publisher, clock, db_url, monkeypatch):
    allowing = ZenConfig.model_validate({**config.model_dump(), "secrets": ["projects/my-project/secrets/*/versions/*"]})
    zen, functions = submitted_functions(allowing, db, publisher, clock, db_url, monkeypatch)

    functions.submit(job_request("j", secrets={"HF_TOKEN": HF}))

    assert [json.loads(m.data)["secrets"] for m in publisher.on("zen-job-start")] == [{"HF_TOKEN": HF}]


def test_zen_submit_refuses_with_the_functions_rule(config):
    """``zen submit`` checks through ``resolve_request``, as the function does, before publishing."""
    from zen.core.errors import Rejected
    from zen.core.models import JobRequest
    from zen.jobs.placement import resolve_request

    queued = with_queues(config, QUEUES)
    assert resolve_request(queued, JobRequest.model_validate(job_request("x", secrets={"T": HF}))).queue == "research"
    with pytest.raises(Rejected, match="secret T: queue batch allows no reference"):
        resolve_request(queued, JobRequest.model_validate(job_request("x", user_id="bob", secrets={"T": HF})))


@pytest.mark.parametrize("pattern", ["hf-*", "projects/p/secrets/x", "projects/p/secrets/x/versions/1/more",
                                     "projects/p/secrets/x y/versions/1"])
def test_a_bad_pattern_in_the_configuration_names_it(config, pattern):
    with pytest.raises((ConfigError, ValueError), match="is not a pattern of secret versions"):
        with_queues(config, [{**QUEUES[0], "secrets": [pattern]}])


# -- zen submit --secret ----------------------------------------------------------------------------------
@pytest.fixture
def user_env(config, publisher, db_url, monkeypatch, tmp_path):
    """``zen submit`` against this test's project, with a configuration that allows my-project's hf-* secrets."""
    path = tmp_path / "zen.yaml"
    allowing = {**config.model_dump(mode="json"), "secrets": ["projects/my-project/secrets/hf-*/versions/*"]}
    path.write_text(yaml.safe_dump(allowing, sort_keys=False))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    monkeypatch.setenv("ZEN_PROJECT", config.project)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return publisher


def test_zen_submit_secret_flags_reach_the_request(user_env, tmp_path, capsys):
    spec = tmp_path / "job.yaml"
    spec.write_text(f"job_id: s-1\nuser_id: alice\ncluster: 1xl4\ncommand: [python, t.py]\nsecrets: {{A: {HF}}}\n")
    other = "projects/my-project/secrets/hf-other/versions/2"

    assert main(["submit", str(spec), "--secret", f"B={other}"]) == 0

    [message] = user_env.on("zen-job-submitted")
    assert json.loads(message.data)["secrets"] == {"A": HF, "B": other}


@pytest.mark.parametrize("flag, code, said", [
    ("HF_TOKEN", 2, "--secret 'HF_TOKEN': expected KEY=VALUE"),
    ("HF_TOKEN=hf-token", 2,
     "HF_TOKEN: its value (not quoted: it may be the secret itself) is not a Secret Manager secret version"),
    ("HF_TOKEN=projects/my-project/secrets/db/versions/1", 1,
     "secret HF_TOKEN: this Zen (it has no queues) allows no reference projects/my-project/secrets/db/versions/1"),
])
def test_zen_submit_refuses_a_bad_or_unallowed_secret_before_publishing(user_env, capsys, flag, code, said):
    assert main(["submit", "--user", "alice", "--cluster", "1xl4", "--secret", flag, "--", "python", "t.py"]) == code
    assert said in capsys.readouterr().err
    assert user_env.on("zen-job-submitted") == []


@pytest.mark.parametrize("fields, reason", [
    ({"env": {"ZEN_NODE_RANK": "0"}}, "env: ZEN_NODE_RANK: names Zen sets itself"),
    ({"env": {"MASTER_ADDR": "10.0.0.1", "EPOCHS": "3"}}, "env: MASTER_ADDR: names Zen sets itself"),
    ({"secrets": {"PATH": HF}}, "secrets: PATH: a secret may not be named as Zen's variables or those"),
    ({"secrets": {"LD_PRELOAD": HF, "DOCKER_HOST": HF}}, "secrets: DOCKER_HOST, LD_PRELOAD: a secret may not"),
    # read by the registry's credential helper (gcloud's wrapper) the docker CLI starts when it pulls
    ({"secrets": {"CLOUDSDK_PYTHON": HF, "https_proxy": HF}}, "secrets: CLOUDSDK_PYTHON, https_proxy: a secret"),
], ids=["zen-node-rank", "torchrun", "path", "loader-and-docker", "credential-helper"])
def test_a_name_zen_sets_or_the_container_launch_reads_is_rejected(functions, zen, publisher, fields, reason):
    """A job's own ZEN_NODE_RANK once put its container on the VM's network (a gang's node's), and a secret's
    value is in the environment of the programs that start the container."""
    assert_rejected(functions, zen, publisher, job_request("j1", **fields), reason)


# A Hugging Face token's shape, and a Slack incoming webhook's URL (whoever holds it may post to the channel).
TOKEN = "hf_Xq3vLw9ZpT2rYk8sNc4bMd7fGh1jKa5eUo"
SLACK_URL = "https://hooks.slack.com/services/T0AB12CDE/B0FG34HIJ/k3yM4t3r1alS3cr3tPart"


@pytest.mark.parametrize("fields, value, reason", [
    ({"secrets": {"HF_TOKEN": TOKEN}}, TOKEN, "secrets: HF_TOKEN: its value (not quoted: it may be the secret itself)"
                                              " is not a Secret Manager secret version"),
    ({"notify": [{"slack": SLACK_URL}]}, "k3yM4t3r1alS3cr3tPart", "notify.0: slack: its value (not quoted"),
    ({"secrets": TOKEN}, TOKEN[:20], "secrets: Input should be a valid dictionary"),  # not even the mapping
    ({"notify": [f"https://example.com/hook/{TOKEN}"]}, TOKEN[:8], "notify.0: Input should be a valid dictionary"),
], ids=["token-in-secrets", "slack-url-in-notify", "token-as-secrets", "url-as-target"])
def test_a_value_given_in_place_of_a_reference_is_refused_without_repeating_it(functions, zen, publisher, caplog,
                                                                                  fields, value, reason):
    """A token or a webhook URL pasted where its secret's reference goes is refused, naming the field; the reason
    (the rejected row's, the job.rejected event every subscriber of zen-job-events reads, the function's log line)
    never repeats it, nor its start: it is the credential the reference was meant to keep out of Zen."""
    import logging

    from zen.logs import JsonFormatter

    with caplog.at_level(logging.WARNING, logger="zen"):
        response = functions.send("on_job_submitted", json.dumps(job_request("j", **fields)).encode(), message_id="m-1")
    assert response.status_code == 200  # acked

    _, _, [rejected] = snapshot(zen)
    [event] = rejected_events(publisher)
    [record] = [r for r in caplog.records if r.getMessage() == "message rejected"]
    assert reason in rejected["reason"]
    for said in (rejected["reason"], json.dumps(event), JsonFormatter().format(record)):
        assert value not in said, said
