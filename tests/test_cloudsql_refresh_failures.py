"""The Cloud SQL connector refreshes its Google access token and asks the Cloud SQL Admin API for the instance's
addresses and certificate as it connects. What failed there (google-auth's RefreshError, aiohttp's
ClientResponseError) left ``Database`` as raised: an outage of the metadata server or of the Admin API was logged as
a bug in Zen, with its traceback, and ended a scale tick's per-cluster loops. An outage is a ``TransientError`` naming
what failed; a refusal that a retry cannot change a ``ConfigError`` naming the fix (zen.store.cloudsql_errors).

The real connector and google-auth talk to local HTTP servers standing in for the GCE metadata server, Google's
token endpoint and the Admin API."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest

from zen.core.errors import ConfigError, TransientError

ROOT = Path(__file__).resolve().parents[1]
INSTANCE = "p:us-central1:zen-db"


@contextlib.contextmanager
def _serving(answer: Callable[[str, str], tuple[int, dict[str, str], bytes]]) -> Iterator[tuple[int, list[str]]]:
    """A local HTTP server answering each request with ``answer(method, path)``; yields its port and the paths
    asked, in order."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            asked.append(self.path)
            status, headers, body = answer(self.command, self.path)
            self.send_response(status)
            for name, value in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], asked
    finally:
        server.shutdown()
        server.server_close()


def _metadata_server(method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """The GCE metadata server of an instance whose token endpoint is down (503)."""
    flavor = {"Metadata-Flavor": "Google"}
    if path.startswith("/computeMetadata/v1/instance/service-accounts/default/token"):
        return 503, {**flavor, "Content-Type": "text/plain"}, b"service unavailable"
    if path.startswith("/computeMetadata/v1/instance/service-accounts/default/"):
        info = {"email": "fn@p.iam.gserviceaccount.com", "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
                "aliases": ["default"]}
        return 200, {**flavor, "Content-Type": "application/json"}, json.dumps(info).encode()
    if path.startswith("/computeMetadata/v1/project/project-id"):
        return 200, {**flavor, "Content-Type": "application/text"}, b"p"
    if path in ("", "/"):  # google-auth's ping: is this Compute Engine?
        return 200, flavor, b""
    return 404, {**flavor, "Content-Type": "text/plain"}, b"not found"


# google-auth reads GCE_METADATA_HOST as it is imported: the connection is made in a process of its own.
_FIRST_USE = textwrap.dedent("""
    import json
    from zen.store.connect import cloudsql_connect_factory
    from zen.store.db import Database

    db = Database(cloudsql_connect_factory(%r))
    db.open_limit_s = 120.0  # google-auth tries the token endpoint five times, 15 s apart in all
    try:
        with db.transaction() as tx:
            tx.execute("SELECT 1")
        print(json.dumps({"raised": None}))
    except Exception as exc:
        print(json.dumps({"raised": type(exc).__name__, "message": str(exc)}))
""") % INSTANCE


def test_a_token_endpoint_down_is_transient_and_names_the_token(tmp_path):
    with _serving(_metadata_server) as (port, asked):
        home = tmp_path / "home"
        home.mkdir()
        drop = ("GOOGLE_APPLICATION_CREDENTIALS", "NO_GCE_CHECK", "GCE_METADATA_ROOT", "ZEN_DATABASE_URL")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env.update({"HOME": str(home), "CLOUDSDK_CONFIG": str(home / "gcloud"), "ZEN_DB_USER": "fn@p.iam",
                    "GCE_METADATA_HOST": f"127.0.0.1:{port}", "GCE_METADATA_IP": f"127.0.0.1:{port}",
                    "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}"})
        done = subprocess.run([sys.executable, "-c", _FIRST_USE], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=150)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert any(p.startswith("/computeMetadata/v1/instance/service-accounts/default/token") for p in asked), asked
    assert seen["raised"] == "TransientError", seen
    assert "access token" in seen["message"] and "503" in seen["message"], seen


@pytest.fixture(scope="module")
def service_account_key(tmp_path_factory) -> Iterator[Callable[[int], str]]:
    """A service account key file whose token endpoint is the local server on ``port`` (google-auth signs its
    assertion with the key and posts it there)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()

    def written(port: int) -> str:
        path = tmp_path_factory.mktemp("key") / "key.json"
        path.write_text(json.dumps({
            "type": "service_account", "project_id": "p", "private_key_id": "k1", "private_key": pem,
            "client_email": "fn@p.iam.gserviceaccount.com", "client_id": "1",
            "token_uri": f"http://127.0.0.1:{port}/token"}))
        return str(path)

    yield written


def _admin_api(status: int, message: str) -> Callable[[str, str], tuple[int, dict[str, str], bytes]]:
    """Google's token endpoint, and the Cloud SQL Admin API answering every request with ``status``."""
    def answer(method: str, path: str) -> tuple[int, dict[str, str], bytes]:
        if path == "/token":
            token = {"access_token": "ya29.local", "expires_in": 3600, "token_type": "Bearer"}
            return 200, {"Content-Type": "application/json"}, json.dumps(token).encode()
        error = {"error": {"code": status, "message": message}}
        return status, {"Content-Type": "application/json"}, json.dumps(error).encode()
    return answer


ADMIN_API = {  # status, the API's message: what is raised, words it must hold
    "quota (429)": (429, "Quota exceeded for quota metric 'Connect Queries'", TransientError, ["Admin API", "429"]),
    "no permission (403)": (403, "The client is not authorized to make this request.", ConfigError,
                            ["403", "roles/cloudsql.client"]),
    "no such instance (404)": (404, "The Cloud SQL instance does not exist.", ConfigError,
                               ["404", "ZEN_CLOUDSQL_INSTANCE"]),
    "down (503)": (503, "The service is currently unavailable.", TransientError, ["Admin API", "503"]),
}


@pytest.mark.parametrize("case", list(ADMIN_API))
def test_what_the_admin_api_answers_is_read_as_an_outage_or_a_fix(case, service_account_key):
    """The connector built as ``cloudsql_connect_factory`` builds it, with its Admin API on a local server (the
    factory takes Application Default Credentials and Google's endpoint)."""
    from google.cloud.sql.connector import Connector, IPTypes
    from google.oauth2 import service_account

    from zen.store.connect import cloudsql_connect
    from zen.store.db import Database

    status, message, kind, words = ADMIN_API[case]
    with _serving(_admin_api(status, message)) as (port, asked):
        credentials = service_account.Credentials.from_service_account_file(service_account_key(port))
        connector = Connector(refresh_strategy="lazy", credentials=credentials,
                              sqladmin_api_endpoint=f"http://127.0.0.1:{port}")
        try:
            db = Database(functools.partial(cloudsql_connect, connector, INSTANCE, "fn@p.iam", "zen", IPTypes.PRIVATE))
            with pytest.raises(Exception) as raised, db.transaction() as tx:
                tx.execute("SELECT 1")
        finally:
            connector.close()
    assert any("/instances/zen-db/connectSettings" in path for path in asked), asked
    assert type(raised.value) is kind, repr(raised.value)
    assert all(word in str(raised.value) for word in words), str(raised.value)
    assert INSTANCE in str(raised.value), str(raised.value)
