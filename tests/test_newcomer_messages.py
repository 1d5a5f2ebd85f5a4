"""A newcomer following README.md, docs/how-to/deploy.md and docs/reference/configuration.md: the messages they
meet say what to fix, and a person listed both as a database admin and as a reader gets one SQL user.

The CLI runs as a subprocess (no database, no Google service reached: each case fails before either)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time

from tests.terraform.hcl import Module

DROP = ("PUBSUB_EMULATOR_HOST", "ZEN_DATABASE_URL", "ZEN_CLOUDSQL_INSTANCE", "ZEN_DB_USER", "ZEN_CONFIG",
        "GOOGLE_APPLICATION_CREDENTIALS", "ZEN_ID_TOKEN", "ZEN_IDENTITY_ENDPOINT", "ZEN_JOB_LOGS_DIR",
        "ZEN_PROJECT", "ZEN_DEBUG")


def _token(email: str = "alice@example.com") -> str:
    part = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    now = int(time.time())
    claims = {"email": email, "aud": "zen:my-project", "iss": "https://accounts.google.com", "sub": "1",
              "iat": now, "exp": now + 3600}
    return f"{part({'alg': 'RS256', 'kid': 'k'})}.{part(claims)}.c2ln"


def _zen(tmp_path, *argv: str, **extra: str) -> subprocess.CompletedProcess:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    env.update({"HOME": str(home), "CLOUDSDK_CONFIG": str(home / "gcloud"), "USER": "alice",
                "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9", "NO_GCE_CHECK": "True",
                **extra})
    return subprocess.run([sys.executable, "-m", "zen.cli.main", *argv], cwd=work, env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_deployed_submit_checked_against_the_shipped_configuration_says_so(tmp_path):
    """deploy.md: set ZEN_PROJECT *and* ZEN_CONFIG. With ZEN_CONFIG forgotten, `zen submit` checks the request
    against the shipped default_config.yaml, and its "Zen would refuse this job: unknown cluster" of a cluster the
    deployed Zen has says so: the deployment itself would run it."""
    result = _zen(tmp_path, "submit", "--cluster", "2xh100", "--image", "python:3.11", "--", "python", "t.py",
                  ZEN_PROJECT="my-project", ZEN_ID_TOKEN=_token())
    assert result.returncode == 1, result.stderr
    assert "ZEN_CONFIG" in result.stderr, result.stderr


def test_a_missing_configuration_file_is_not_told_to_set_zen_config_again(tmp_path):
    """ZEN_CONFIG=/nonexistent.yaml names a file that does not exist: to check ZEN_CONFIG, not to set it (it is)."""
    result = _zen(tmp_path, "clusters", ZEN_CONFIG=str(tmp_path / "zen.yml"))
    assert result.returncode == 1
    assert "(set ZEN_CONFIG)" not in result.stderr, result.stderr
    assert "ZEN_CONFIG" in result.stderr, result.stderr


def test_a_database_url_without_a_scheme_is_shown_as_given(tmp_path):
    """ZEN_DATABASE_URL=localhost:5432/zen is shown as written (a scheme of '' named nothing the user wrote)."""
    result = _zen(tmp_path, "jobs", "list", ZEN_DATABASE_URL="localhost:5432/zen")
    assert result.returncode in (1, 2)
    assert "got ''" not in result.stderr, result.stderr
    assert "localhost:5432/zen" in result.stderr, result.stderr


def test_max_parallel_without_an_array_names_the_missing_flag(tmp_path):
    """`zen submit --max-parallel 3 ...` without --array names the flag left out (--array N or --array-params FILE),
    not a JobRequest's fields."""
    result = _zen(tmp_path, "submit", "--max-parallel", "3", "--cluster", "1xl4", "--image", "x", "--", "python",
                  "x", ZEN_PROJECT="my-project", ZEN_ID_TOKEN=_token())
    assert result.returncode == 2, result.stderr
    assert "--array" in result.stderr, result.stderr


def test_one_person_in_db_admin_users_and_db_reader_users_gets_one_sql_user():
    """variables.tf's db_admin_users says 'to read the tables, list them in db_reader_users too': one person in both
    gets one google_sql_user (two of one name on one instance fail the apply, and removing either list's entry
    later would delete the user the other still needs)."""
    module = Module.load()
    users = module.resources_of("google_sql_user")
    readers, admins = users["readers"]["for_each"], users["admins"]["for_each"]
    assert "setsubtract" in readers or "setsubtract" in admins, (readers, admins)
