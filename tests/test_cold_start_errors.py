"""A function whose database variables or configuration file are wrong cannot start: every message it is given
answers 500 (Pub/Sub redelivers it until it is dead-lettered, rightly while the setting is wrong) and the only
clue in the logs is the error ``Zen.from_env`` raised. The functions' Cloud SQL wiring (zen/store/connect.py
``cloudsql_connect_factory``) raised ``KeyError: 'ZEN_DB_USER'`` and ``KeyError: 'PRIVATE_IP'`` (a
ZEN_CLOUDSQL_IP_TYPE of private_ip: the variable not named at all), and ``load_config`` an IsADirectoryError or a
UnicodeDecodeError naming no file: each is a ConfigError naming what to fix now."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from zen.core.errors import ConfigError
from zen.store.db import Database


@pytest.fixture
def anonymous_google(monkeypatch):
    """Application Default Credentials, as a deployed function has (the Cloud SQL connector asks for them
    when it is built, before any variable is read)."""
    import google.auth
    from google.auth.credentials import AnonymousCredentials

    monkeypatch.setattr(google.auth, "default", lambda *a, **k: (AnonymousCredentials(), "p"))
    monkeypatch.delenv("ZEN_DATABASE_URL", raising=False)
    monkeypatch.delenv("ZEN_DB_MAX_OPEN", raising=False)


CASES = {
    "no ZEN_DB_USER": ({"ZEN_CLOUDSQL_INSTANCE": "p:us-central1:zen-db"}, "ZEN_DB_USER"),
    "ZEN_CLOUDSQL_IP_TYPE private_ip": ({"ZEN_CLOUDSQL_INSTANCE": "p:us-central1:zen-db", "ZEN_DB_USER": "fn",
                                         "ZEN_CLOUDSQL_IP_TYPE": "private_ip"}, "ZEN_CLOUDSQL_IP_TYPE"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_wrong_database_variable_is_a_config_error_naming_it(case, anonymous_google, monkeypatch):
    env, variable = CASES[case]
    monkeypatch.delenv("ZEN_CLOUDSQL_INSTANCE", raising=False)
    monkeypatch.delenv("ZEN_DB_USER", raising=False)
    monkeypatch.delenv("ZEN_CLOUDSQL_IP_TYPE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=variable):
        Database.from_env()


def test_a_function_cold_started_without_zen_db_user_says_which_variable(anonymous_google, monkeypatch, caplog):
    """Through functions-framework, as Cloud Functions loads functions/main.py: the first message of a fresh
    instance builds Zen (Zen.from_env) and fails; what the log holds must name the variable to set."""
    import functions_framework

    from zen.core import eventarc
    from zen_dev.local.invoke import FUNCTIONS_MAIN

    monkeypatch.setenv("ZEN_CLOUDSQL_INSTANCE", "p:us-central1:zen-db")
    monkeypatch.delenv("ZEN_DB_USER", raising=False)
    monkeypatch.setenv("ZEN_PROJECT", "p")
    app = functions_framework.create_app("on_job_submitted", str(FUNCTIONS_MAIN), "cloudevent")
    monkeypatch.setattr(sys.modules["main"], "_zen", None)  # a fresh instance
    event = eventarc.pubsub_cloud_event(json.dumps({"job_id": "j-1"}).encode(), message_id="m-1",
                                        topic="zen-job-submitted", project="p")
    body, headers = eventarc.structured_request(event)
    with caplog.at_level(logging.ERROR):
        answer = app.test_client().post("/", data=body, headers=headers)
    assert answer.status_code == 500  # redelivered: right while the variable is missing
    [error] = [r.exc_info[1] for r in caplog.records if r.exc_info]
    assert isinstance(error, ConfigError) and "ZEN_DB_USER" in str(error), repr(error)  # got KeyError('ZEN_DB_USER')


@pytest.mark.parametrize("problem", ["a directory", "not UTF-8"])
def test_an_unreadable_configuration_file_is_a_config_error_naming_it(problem, tmp_path, monkeypatch):
    """A ZEN_CONFIG naming a directory, or a file saved in Latin-1, escaped ``load_config``'s ConfigError."""
    from zen.core.config import load_config

    if problem == "a directory":
        path = tmp_path
    else:
        path = tmp_path / "zen_config.yaml"
        path.write_bytes("# r\xe9glages\nproject: p\n".encode("latin-1"))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    with pytest.raises(ConfigError, match=str(path)):
        load_config()
