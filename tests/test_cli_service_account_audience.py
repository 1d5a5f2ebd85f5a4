"""`zen submit` and `zen stop` as a service account (CI on a VM or Cloud Build: the metadata server's identity)
ask Google for an ID token for the audience the deployed functions accept, ``zen:<ZEN_PROJECT>``. They asked for
the configuration file's project: with the shipped configuration (``project: zen-local``) every submission and
stop a service account sent was refused by the functions, after ``zen submit`` had said "submitted".

The CLI runs in its own process, as a user runs it: google-auth reads ``GCE_METADATA_HOST`` once, when it is
first imported, so in a process that imported it before (another test) the fake metadata server is never asked."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
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
def on_a_vm(tmp_path):
    """A metadata server (google-auth's GCE credentials) whose service account is ``EMAIL``, and the
    environment of a process on that VM: no local stack, the shipped configuration (project zen-local)."""
    now = int(time.time())
    metadata = FakeMetadata({
        "/": "",  # google-auth's ping
        "project/project-id": "real-project",
        "instance/service-accounts/default/": json.dumps({"email": EMAIL, "aliases": ["default"],
                                                          "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}),
        "instance/service-accounts/default/identity": _unsigned({"email": EMAIL, "aud": "x", "iat": now,
                                                                 "exp": now + 3600}),
    })
    dropped = ("PUBSUB_EMULATOR_HOST", "ZEN_IDENTITY_ENDPOINT", "ZEN_ID_TOKEN", "ZEN_CONFIG",
               "GOOGLE_APPLICATION_CREDENTIALS", "NO_GCE_CHECK")
    env = {name: value for name, value in os.environ.items() if name not in dropped}
    env.update(GCE_METADATA_HOST=metadata.host, GCE_METADATA_IP=metadata.host, HOME=str(tmp_path),
               ZEN_PROJECT="real-project")  # as deploy.md says, and as terraform gives the functions
    yield metadata, env
    metadata.close()


def test_a_service_accounts_token_is_asked_for_the_audience_the_deployed_functions_accept(on_a_vm, tmp_path):
    metadata, env = on_a_vm
    sender = ("import json; from zen.cli.user import _sender; sender, error = _sender(); "
              "print(json.dumps([getattr(sender, 'email', None), repr(error)]))")
    result = subprocess.run([sys.executable, "-c", sender], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [EMAIL, "None"], result.stderr
    asked = [parse_qs(urlparse(r).query)["audience"] for r in metadata.requests if "/identity" in r]
    functions = load_config().model_copy(update={"project": "real-project"})  # zen.app.Zen.from_env
    assert load_config().project != "real-project"
    assert asked == [[functions.auth.audience_of(functions.project)]], asked
