"""`zen` as the user of a deployed Zen runs it (ZEN_PROJECT set, no local stack, no `.zen/`), when something it
needs is wrong: each command ends within seconds with one `zen:` line saying what to fix, and no local-stack advice.

No database or Google service is needed: the database is a socket that never answers, and the Google token
endpoint is a local HTTP server answering as Google does for a revoked key (invalid_grant); the real client
libraries (pg8000, google-auth, the Cloud SQL connector, Cloud Logging, Pub/Sub) talk to them.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import time

import pytest

from tests.token_endpoint import TokenEndpoint

LOOPBACK_METADATA = {"GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9", "NO_GCE_CHECK": "True"}


def _deployed_env(tmp_path, **extra: str) -> dict[str, str]:
    """A deployed Zen's user: ZEN_PROJECT, no stack, no emulator, no credentials unless ``extra`` gives them."""
    drop = ("PUBSUB_EMULATOR_HOST", "ZEN_DATABASE_URL", "ZEN_CLOUDSQL_INSTANCE", "ZEN_DB_USER", "ZEN_CONFIG",
            "GOOGLE_APPLICATION_CREDENTIALS", "ZEN_ID_TOKEN", "ZEN_IDENTITY_ENDPOINT", "ZEN_JOB_LOGS_DIR",
            "ZEN_LOGGING_ENDPOINT", "ZEN_DEBUG")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env.update({"HOME": str(home), "CLOUDSDK_CONFIG": str(home / "gcloud"), "USER": "alice",
                "ZEN_PROJECT": "my-project", **LOOPBACK_METADATA, **extra})
    return env


def _zen(forks, tmp_path, *argv: str, limit: float = 45, **env: str) -> subprocess.CompletedProcess:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    started = time.monotonic()
    try:
        result = forks.run("zen.cli.main", argv, _deployed_env(tmp_path, **env), work, limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`zen {' '.join(argv)}` still ran after {limit:g} s")
    result.elapsed = time.monotonic() - started  # type: ignore[attr-defined]
    return result


def _one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zen: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def silent_database():
    """A TCP port that accepts connections and never says a word (a proxy or load balancer whose backend is
    gone): the Postgres startup never completes."""
    with silent_server() as (url, _):
        yield url


@contextlib.contextmanager
def silent_server():
    """``silent_database``'s server: (its URL, the connections it accepted)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(50)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"postgresql://zen:secret@127.0.0.1:{server.getsockname()[1]}/zen", held
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        server.close()


@pytest.mark.parametrize("argv, said", [(("jobs", "list"), "cannot reach the database"),
                                        (("stop", "x1"), "no Google credentials")])  # the stop goes on to be sent
def test_a_database_that_never_answers_is_given_up_on(tmp_path, silent_database, argv, said, cli_forks):
    """pg8000 was given no timeout (zen.store.db.ConnectionTarget.connect): the command waited for ever, `zen stop`
    too, which sends the stop when it cannot read the database (here it then has no credentials to send it with)."""
    result = _zen(cli_forks, tmp_path, *argv, ZEN_DATABASE_URL=silent_database)
    line = _one_line(result)
    assert said in line and "zen local up" not in line, line


@pytest.fixture
def revoked_credentials(tmp_path):
    """Application Default Credentials of a service account whose key Google no longer takes: the token
    endpoint (the key file's token_uri, a local server) answers invalid_grant, as Google does."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    server = TokenEndpoint(lambda: (400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = tmp_path / "key.json"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "my-project", "private_key_id": "k1", "private_key": pem,
        "client_email": "ci@my-project.iam.gserviceaccount.com", "client_id": "1",
        "token_uri": server.uri}))
    yield str(path)
    server.close()


@pytest.mark.parametrize("argv, env", [
    (("jobs", "list"), {"ZEN_CLOUDSQL_INSTANCE": "my-project:us-central1:zen", "ZEN_DB_USER": "alice@example.com"}),
    (("logs", "x1"), {}),
])
def test_refused_credentials_are_told_in_one_line(tmp_path, revoked_credentials, argv, env, cli_forks):
    """It printed `zen: RefreshError: ('invalid_grant: ...', {...}) (set ZEN_DEBUG=1 to see where)`."""
    result = _zen(cli_forks, tmp_path, *argv, GOOGLE_APPLICATION_CREDENTIALS=revoked_credentials, **env)
    line = result.stderr.strip().splitlines()[0]  # (the Cloud SQL connector's aiohttp may warn after it, at exit)
    assert result.returncode == 1 and line.startswith("zen: ") and "Traceback" not in result.stderr
    assert "RefreshError" not in line and "gcloud auth application-default login" in line, line


def test_submit_with_refused_credentials_says_so_not_is_the_stack_up(tmp_path, revoked_credentials, cli_forks):
    """The publish waited 30 s and said `could not publish ...: TimeoutError (is the stack up? zen local up);
    job ... may have been published all the same`: none was, and the local stack has nothing to do with it."""
    result = _zen(cli_forks, tmp_path, "submit", "--image", "busybox", "--cluster", "1xl4", "--", "true",
                  GOOGLE_APPLICATION_CREDENTIALS=revoked_credentials)
    line = _one_line(result)
    assert result.returncode == 1
    assert "zen local up" not in line and "TimeoutError" not in line, line
    assert "invalid_grant" in line or "credentials" in line, line
    assert result.elapsed < 20, result.elapsed  # type: ignore[attr-defined]

