"""A VM's first word (``zen.core.vm_heartbeat.VmUp``): the instance template's startup script says the
VM is up before anything is installed, with the VM's identity token for ``<audience>:up``; through the
heartbeat function, with ``ZEN_VM_PROOF=required``, it makes a scaling pass run while the VM's cluster
has boots racing (which then deletes the boots it beat before they bill) and records nothing. Its token
vouches for nothing else, and a VM's heartbeat token is no first word's."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

import zen.agent
from tests.agent.fakes import FakeMetadata
from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from tests.test_heartbeat_seq import ms, rejections
from tests.test_queues_waiting import CountingScaler
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)
from tests.waiting import wait_for
from zen.adapters.message_key import MessageKey, audience, token_attributes
from zen.store import repository

SCRIPT = Path(zen.agent.__file__).with_name("startup.sh")
VM, ZONE, CLUSTER = "zen-4xa100-40gb-us-central1-a0a0", "us-central1-a", "4xa100-40gb"


@pytest.fixture
def scaler():
    return CountingScaler()


@pytest.fixture
def zen(config, db, publisher, clock, certs, scaler, monkeypatch):
    from zen.app import Zen

    monkeypatch.setenv("ZEN_VM_PROOF", "required")
    monkeypatch.setenv("ZEN_VM_PROOF_CERTS_URL", certs.url)
    monkeypatch.setenv("ZEN_PROOF_SECRET", secrets.token_urlsafe(32))
    zen = Zen(config, db, publisher, clock, scaler=scaler)
    yield zen
    zen.relay.marks.flush()


class PubSubRest:
    """Pub/Sub's REST ``topics.publish`` on 127.0.0.1: records each request (path, headers, body)."""

    def __init__(self):
        self.requests: list[tuple[str, dict[str, str], dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((self.path, dict(self.headers), body))
                answer = json.dumps({"messageIds": ["1"]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def up(vm: str = VM, cluster: str = CLUSTER, zone: str = ZONE, **fields) -> dict:
    return {"kind": "up", "vm": vm, "cluster": cluster, "region": zone.rsplit("-", 1)[0], "zone": zone,
            "sent_at": "2026-01-01T00:00:00+00:00", **fields}


def up_token(issuer, clock, project, vm=VM, zone=ZONE, aud=None) -> str:
    return issuer.token(vm=vm, zone=zone, project=project, audience=aud or f"{audience(project)}:up",
                        now=clock().timestamp())


def said(functions, body: dict, token: str | None):
    return functions.send("on_heartbeat", json.dumps(body).encode(), attributes=token_attributes(token) if token else {})


def test_the_startup_script_says_the_vm_is_up_first_and_zen_takes_it(functions, zen, scaler, clock, issuer,
                                                                      project, tmp_path):
    """What the script publishes (REST, the metadata server's access token, the token for ``:up``) is a
    first word the heartbeat function accepts: a pass for the VM's cluster runs, no VM row is written."""
    token = up_token(issuer, clock, project)
    metadata = FakeMetadata({
        "instance/attributes/zen-agent-package": "gs://my-bucket/zen-0.1.0-py3-none-any.whl",
        "instance/attributes/zen-cluster": CLUSTER,
        "instance/attributes/zen-heartbeats-topic": f"projects/{project}/topics/zen-heartbeats",
        "instance/name": VM,
        "instance/zone": f"projects/123/zones/{ZONE}",
        "instance/service-accounts/default/identity": token,
        "instance/service-accounts/default/token": json.dumps({"access_token": "ya29.vm", "expires_in": 3599}),
    })
    pubsub = PubSubRest()
    try:
        env = {**os.environ, "GCE_METADATA_HOST": metadata.host, "ZEN_STARTUP_ROOT": str(tmp_path),
               "ZEN_STARTUP_DRY_RUN": "1", "ZEN_PUBSUB_ENDPOINT": pubsub.endpoint}
        result = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        wait_for(lambda: pubsub.requests, 20, what="the first word's publish")
        [(path, headers, body)] = pubsub.requests
        [asked] = [r for r in metadata.requests if "identity" in r]
    finally:
        pubsub.close()
        metadata.close()
    assert path == f"/v1/projects/{project}/topics/zen-heartbeats:publish"
    assert headers["Authorization"] == "Bearer ya29.vm"
    assert parse_qs(urlparse(asked).query) == {"audience": [f"zen-heartbeats:{project}:up"], "format": ["full"]}
    [message] = body["messages"]
    data = base64.b64decode(message["data"])
    assert json.loads(data)["kind"] == "up" and json.loads(data)["vm"] == VM

    assert functions.send("on_heartbeat", data, attributes=message["attributes"]).status_code == 200
    assert scaler.passes == [CLUSTER] and rejections(zen) == []
    with zen.db.transaction() as session:
        assert repository.list_vms(session) == []  # the word changes no row


def test_a_first_word_needs_its_own_token_and_gives_it_no_other_use(functions, zen, scaler, clock, issuer,
                                                                     project):
    """Refused, recorded, acked, and no pass: no token; a heartbeat's token (bound to a message key); a
    token for another VM; a VM of another cluster. And an ``:up`` token carries no heartbeat."""
    key = MessageKey()
    heartbeat_token = issuer.token(vm=VM, zone=ZONE, project=project, audience=audience(project, key.fingerprint),
                                   now=clock().timestamp())
    other_cluster = "zen-8xa100-40gb-us-central1-a0a0"
    cases = [(up(), None, "carries no vm_proof attribute"),
             (up(), heartbeat_token, f"first word is for audience 'zen-heartbeats:{project}:key:"),
             (up(), up_token(issuer, clock, project, vm="zen-4xa100-40gb-us-central1-b1b1"), "a VM may only report"),
             (up(vm=other_cluster), up_token(issuer, clock, project, vm=other_cluster), "is not an instance of cluster")]
    for n, (body, token, why) in enumerate(cases):
        assert said(functions, body, token).status_code == 200
        reasons = rejections(zen)
        assert len(reasons) == n + 1 and any(why in r for r in reasons), reasons
    assert scaler.passes == []

    functions.submit(job_request("j1"))
    claim = json.dumps(heartbeat("j1", "CLAIMED", ms(clock), vm=VM)).encode()
    attributes = key.attributes(up_token(issuer, clock, project), claim, {})  # signed, but by no key it binds
    assert functions.send("on_heartbeat", claim, attributes=attributes).status_code == 200
    assert job(zen, "j1").status.value == "QUEUED"
    assert any(f"not zen-heartbeats:{project}:key:<key>" in r for r in rejections(zen))
