"""Checkpoints through a link to Cloud Storage the test controls: the official client against the Cloud Storage
stand-in behind a forwarding proxy that moves request bodies at ``LINK_BYTES_S`` (a VM's upload bandwidth, scaled down
with the files) and can answer 403 as IAM does (``refuse``: a part of the path). The real agent (AttemptRunner) and
job processes."""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from google.cloud import storage as gcs

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import VM, make_agent, start_message
from tests.agent.test_upload_end import finals, settings
from tests.agent.helpers import names_a_save
from tests.waiting import wait_for
from zen.core.checkpoints import StartCheckpoint, checkpoint_uri
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat

URI = checkpoint_uri("ckpt-bkt", "checkpoints", "4xa100-40gb", "big")
PREFIX = "checkpoints/4xa100-40gb/big/"
LINK_BYTES_S = 5_000_000
WEIGHTS = 80_000_000

# Writes its weights once and its step; at SIGTERM writes the step it got to (a few bytes, whole) and exits.
JOB = ("import os, pathlib, signal, sys, time\n"
       "d = pathlib.Path(os.environ['ZEN_CHECKPOINT_DIR'])\n"
       "def write(name, data):\n"
       "    (d / (name + '.tmp')).write_bytes(data); os.replace(d / (name + '.tmp'), d / name)\n"
       "signal.signal(signal.SIGTERM, lambda *a: (write('step', b'step 2, at the notice'), sys.exit(0)))\n"
       "write('weights.bin', b'w' * int(sys.argv[1])); write('step', b'step 1')\n"
       "time.sleep(300)\n")

class _Link(ThreadingHTTPServer):
    daemon_threads = True
    target: str


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Link

    def log_message(self, *args) -> None:
        pass

    def _any(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if (refused := getattr(self.server, "refuse", None)) and refused in self.path:  # IAM says no
            data = json.dumps({"error": {"code": 403, "message": "zen-agent@ does not have storage.objects.get access",
                                         "errors": [{"reason": "forbidden"}]}}).encode()
            self.send_response(403)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        time.sleep(len(body) / LINK_BYTES_S)  # the VM's upload bandwidth
        target = urlsplit(self.server.target)
        connection = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        connection.request(self.command, self.path, body=body, headers=headers)
        answer = connection.getresponse()
        data = answer.read()
        location = answer.getheader("Location")
        self.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() in ("content-length", "connection", "transfer-encoding", "location"):
                continue
            self.send_header(key, value)
        if location:
            self.send_header("Location", location.replace(self.server.target, f"http://127.0.0.1:{self.server.server_address[1]}"))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _any


@pytest.fixture
def slow_link(storage, monkeypatch):
    link = _Link(("127.0.0.1", 0), _Forward)
    link.target = storage.address
    threading.Thread(target=link.serve_forever, daemon=True).start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{link.server_address[1]}")
    yield link
    link.shutdown()
    link.server_close()


def test_the_notice_time_write_is_saved_when_the_rest_was_saved_by_a_periodic_save(storage, slow_link, tmp_path):
    """A spot VM's notice: the job writes a small file at SIGTERM, as docs/how-to/checkpoints.md ("Time at a
    preemption") asks, and relies on the periodic saves for the rest. The rest (80 MB of weights, unchanged) was saved
    by a periodic save, but the last save uploaded every file again: on a link that cannot move the whole folder within
    the notice's budget it was cut, and the rerun restored the periodic save's step. The last save now uploads the
    step alone and names the weights' object of the save before (80 MB at 5 MB/s: 5 GiB at 320 MB/s, a VM's link)."""
    bucket = gcs.Client().create_bucket("ckpt-bkt")
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = lambda m: [ControlMessage(vm=VM, job_id="big", attempt=1, action=ControlAction.CONFIRM,
                                                 reason="won")] if (
        isinstance(m, Heartbeat) and m.status is AgentStatus.CLAIMED) else []
    transport.add_start(start_message("big", command=[sys.executable, "-c", JOB, str(WEIGHTS)],
                                      checkpoint=StartCheckpoint(uri=URI, every=1, max_bytes=10**9)))
    agent = make_agent(transport, settings(tmp_path, stop_grace_s=2))
    manifest = bucket.blob(PREFIX + "LATEST.json")

    def preempted() -> None:  # once the periodic save holding the weights and step 1 has landed
        wait_for(lambda: names_a_save(bucket, manifest.name),
                 timeout_s=120, what="the periodic save of the weights")  # (not the restore's, naming none)
        time.sleep(1.0)
        agent.request_shutdown("preempted")

    threading.Thread(target=preempted, daemon=True).start()
    agent.run()
    final = finals(transport)["big"]
    assert final.status is AgentStatus.PREEMPTED
    latest = json.loads(manifest.download_as_bytes())
    step = bucket.blob(PREFIX + latest["generation"] + "step").download_as_bytes()
    assert step == b"step 2, at the notice", (step, final.message.splitlines()[:4])
    [weights] = [item for item in latest["files"] if item["path"] == "weights.bin"]
    assert not weights["object"].startswith(latest["generation"])  # the periodic save's object, named again
    assert bucket.get_blob(PREFIX + weights["object"]).size == WEIGHTS  # and kept: the save before's others went


def _rerun(bucket, monkeypatch):
    """Attempt 2 of a job whose checkpoint holds step 1 (refusals asked again for 1 s, every 0.2 s)."""
    from zen.agent import checkpoint_restore

    monkeypatch.setattr(checkpoint_restore, "REFUSED_FOR_S", 1.0)
    monkeypatch.setattr(checkpoint_restore, "REFUSED_WAIT_S", 0.2)
    bucket.blob(PREFIX + "attempt-1/save-1/step").upload_from_string(b"step 1")
    bucket.blob(PREFIX + "LATEST.json").upload_from_string(json.dumps({
        "generation": "attempt-1/save-1/", "attempt": 1, "reason": "every 600 s", "saved_at": time.time(),
        "files": [{"path": "step", "size": 6}], "folders": []}))
    return rerun_reading_step()


def rerun_reading_step() -> FakeTransport:
    """Attempt 2 of job "big", its claim confirmed, whose command prints the checkpoint's restored ``step`` file."""
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = lambda m: [ControlMessage(vm=VM, job_id="big", attempt=2, action=ControlAction.CONFIRM,
                                                 reason="won")] if (
        isinstance(m, Heartbeat) and m.status is AgentStatus.CLAIMED) else []
    read = "import os; print(open(os.path.join(os.environ['ZEN_CHECKPOINT_DIR'], 'step')).read())"
    transport.add_start(start_message("big", attempt=2, command=[sys.executable, "-c", read], env={"ZEN_PREEMPTED": "1"},
                                      checkpoint=StartCheckpoint(uri=URI, every=600, max_bytes=10**9)))
    return transport


def test_a_restore_refused_a_while_is_asked_again_and_one_refused_for_good_fails_saying_so(storage, slow_link, tmp_path,
                                                                                          monkeypatch):
    """The checkpoint's bucket and prefix are Zen's, never the job's. A 403 on them while an IAM binding changes failed
    the preempted job for good (FAILED with no exit code, never retried: its checkpoint, keyed by its job_id, could
    not be resumed by a resubmission); reported PREEMPTED instead, one for good (a prefix renamed before terraform ran)
    requeued it a dozen times before its budget ended it, the refusal named nowhere. A refusal is asked again for
    ``REFUSED_FOR_S``: over by then, the job resumes; lasting, the attempt fails with the refusal and what to check."""
    bucket = gcs.Client().create_bucket("ckpt-bkt")
    slow_link.refuse = "LATEST.json"
    threading.Timer(0.5, lambda: setattr(slow_link, "refuse", None)).start()  # the binding lands
    transport = _rerun(bucket, monkeypatch)
    make_agent(transport, settings(tmp_path / "a")).run()
    final = finals(transport)["big"]
    assert final.status is AgentStatus.SUCCEEDED and "step 1" in final.message, (final.status, final.message)

    slow_link.refuse = "LATEST.json"  # for good
    transport = _rerun(bucket, monkeypatch)
    make_agent(transport, settings(tmp_path / "b")).run()
    final = finals(transport)["big"]
    assert final.status is AgentStatus.FAILED, (final.status, final.message)
    assert "403" in final.message and "may the agents' account read and write this prefix? terraform/checkpoints.tf" in final.message
