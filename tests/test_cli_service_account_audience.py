"""`zen submit` and `zen stop` as a service account (CI on a VM or Cloud Build: the metadata server's identity)
ask Google for an ID token for the audience the deployed functions accept, ``zen:<ZEN_PROJECT>``. They asked for
the configuration file's project: with the shipped configuration (``project: zen-local``) every submission and
stop a service account sent was refused by the functions, after ``zen submit`` had said "submitted"."""

from __future__ import annotations

import base64
import json
import time
from urllib.parse import parse_qs, urlparse

import pytest

from tests.agent.fakes import FakeMetadata
from zen.core.config import load_config

EMAIL = "ci@real-project.iam.gserviceaccount.com"


def _unsigned(claims: dict) -> str:
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2ln"


@pytest.fixture
def on_a_vm(monkeypatch, tmp_path):
    """A metadata server (google-auth's GCE credentials) whose service account is ``EMAIL``; no local stack."""
    now = int(time.time())
    metadata = FakeMetadata({
        "/": "",  # google-auth's ping
        "project/project-id": "real-project",
        "instance/service-accounts/default/": json.dumps({"email": EMAIL, "aliases": ["default"],
                                                          "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}),
        "instance/service-accounts/default/identity": _unsigned({"email": EMAIL, "aud": "x", "iat": now,
                                                                 "exp": now + 3600}),
    })
    monkeypatch.chdir(tmp_path)
    for name in ("PUBSUB_EMULATOR_HOST", "ZEN_IDENTITY_ENDPOINT", "ZEN_ID_TOKEN", "ZEN_CONFIG",
                 "GOOGLE_APPLICATION_CREDENTIALS", "NO_GCE_CHECK"):
        monkeypatch.delenv(name, raising=False)  # the shipped configuration: project zen-local
    monkeypatch.setenv("GCE_METADATA_HOST", metadata.host)
    monkeypatch.setenv("GCE_METADATA_IP", metadata.host)
    monkeypatch.setenv("ZEN_PROJECT", "real-project")  # as deploy.md says, and as terraform gives the functions
    yield metadata
    metadata.close()


def test_a_service_accounts_token_is_asked_for_the_audience_the_deployed_functions_accept(on_a_vm):
    from zen.cli.user import _sender

    sender, error = _sender()
    assert error is None and sender is not None and sender.email == EMAIL
    asked = [parse_qs(urlparse(r).query)["audience"] for r in on_a_vm.requests if "/identity" in r]
    functions = load_config().model_copy(update={"project": "real-project"})  # zen.app.Zen.from_env
    assert load_config().project != "real-project"
    assert asked == [[functions.auth.audience_of(functions.project)]], asked
