"""A job stopped while a periodic checkpoint save uploads (a queue taking its quota back: STOP with
``answer_within_s``, the job requeued as its next attempt once the VM answers): the real AttemptRunner, a
real job process, the official client against the Cloud Storage stand-in, which holds that upload."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from datetime import datetime, timezone

import pytest
from google.cloud import storage as gcs

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import VM, make_agent, start_message
from tests.agent.test_upload_end import finals, settings
from tests.waiting import wait_for
from zen.agent.checkpoint import Checkpoint
from zen.agent.transport import ControlDelivery
from zen.core.checkpoints import StartCheckpoint, checkpoint_uri
from zen.core import lifecycle
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat, InputSpec, Job, JobStatus, StopRequest

URI = checkpoint_uri("ckpt-bkt", "checkpoints", "4xa100-40gb", "ck")
PREFIX = "checkpoints/4xa100-40gb/ck/"

# Writes its state whole (rename), twice; on SIGTERM writes its last state and exits 0.
JOB = ("import os, pathlib, signal, sys, time\n"
       "d = pathlib.Path(os.environ['ZEN_CHECKPOINT_DIR'])\n"
       "def write(text):\n"
       "    (d / 'model.pt.tmp').write_text(text); os.replace(d / 'model.pt.tmp', d / 'model.pt')\n"
       "signal.signal(signal.SIGTERM, lambda *a: (write('epoch 3, at SIGTERM'), sys.exit(0)))\n"
       "write('epoch 1'); time.sleep(1.5); write('epoch 2'); time.sleep(60)\n")


@pytest.fixture
def bucket(storage):
    client = gcs.Client()
    client.create_bucket("ckpt-bkt")
    return client.bucket("ckpt-bkt")


def test_a_stop_during_a_periodic_save_keeps_the_checkpoint_the_report_names(bucket, storage, tmp_path):
    held = storage.state.hold("/save-2/model.pt", "store")  # the periodic save of epoch 2: a slow link
    transport = FakeTransport(VM, virtual_time=False)
    within, at = 4.0, {}
    earlier = set(threading.enumerate())  # an earlier test's threads in this worker are not this attempt's

    def zen(message):
        if not isinstance(message, Heartbeat):
            return []
        if message.status is AgentStatus.CLAIMED:
            return [ControlMessage(vm=VM, job_id="ck", attempt=1, action=ControlAction.CONFIRM, reason="won")]
        if message.status is AgentStatus.RUNNING and held.reached.is_set():  # a queue takes its quota back
            left = within - (time.monotonic() - at.setdefault("stop", time.monotonic()))
            order = ControlMessage(vm=VM, job_id="ck", attempt=1, action=ControlAction.STOP,
                                   reason="preempted: queue prod takes back lent quota")
            return [ControlDelivery(f"c-{time.monotonic()}", order.to_bytes(),
                                    {"vm": VM, "answer_within_s": f"{max(left, 0):.0f}"}, lambda: None)]
        return []

    transport.answer = zen
    transport.add_start(start_message("ck", command=[sys.executable, "-c", JOB],
                                      checkpoint=StartCheckpoint(uri=URI, every=1, max_bytes=10**6)))
    make_agent(transport, settings(tmp_path, stop_grace_s=0.5)).run()

    final = finals(transport)["ck"]
    assert final.status is AgentStatus.STOPPED
    assert "the previous checkpoint is kept" in final.message
    held.release.set()  # the held upload ends after the report
    wait_for(lambda: not [t for t in set(threading.enumerate()) - earlier
                          if t.name in ("zen-transfer", "zen-checkpoint")],
             timeout_s=20, what="the attempt's save threads ended")
    latest = json.loads(bucket.blob(PREFIX + "LATEST.json").download_as_bytes())
    assert (latest["generation"], [(f["path"], f["size"]) for f in latest["files"]]) == ("attempt-1/save-1/",
                                                                                         [("model.pt", 7)])
    assert bucket.blob(PREFIX + "attempt-1/save-1/model.pt").download_as_bytes() == b"epoch 1"


def _run_a_save_on_a_budget(transport: FakeTransport, tmp_path) -> None:
    """A job that writes its checkpoint's file and ends, run with max_runtime_s 2: its last save's budget is short."""
    job = "import os, pathlib; pathlib.Path(os.environ['ZEN_CHECKPOINT_DIR'], 'model.pt').write_text('epoch 9')\n"
    transport.add_start(start_message("ck", command=[sys.executable, "-c", job], max_runtime_s=2,
                                      checkpoint=StartCheckpoint(uri=URI, every=600, max_bytes=10**6)))
    make_agent(transport, settings(tmp_path, stop_grace_s=0.5)).run()


def test_a_last_save_cut_while_its_manifest_is_written_is_reported_as_the_latest(bucket, storage, tmp_path):
    """The last save's budget (max_runtime_s) runs out while its manifest is on its way; the write lands in
    the moment the attempt waits for it before its report. The report must say what the rerun restores: this
    save (it said "the previous checkpoint is kept", and there was none), and the transfer's progress the
    save's own files (it showed the previous save's counts)."""
    held = storage.state.hold("LATEST.json", "store", after=1)  # (after the restore's, naming none)
    cut = threading.Event()

    class OnCut(logging.Handler):  # the attempt logs the cut once the transfer gave up waiting for the save
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == "saving the checkpoint cut or failed":
                cut.set()
                held.release.set()

    handler = OnCut()
    logging.getLogger().addHandler(handler)
    transport = FakeTransport(VM, virtual_time=False)

    def zen(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            return [ControlMessage(vm=VM, job_id="ck", attempt=1, action=ControlAction.CONFIRM, reason="won")]
        return []

    transport.answer = zen
    try:
        _run_a_save_on_a_budget(transport, tmp_path)
    finally:
        logging.getLogger().removeHandler(handler)
    assert cut.is_set()
    final = finals(transport)["ck"]
    assert json.loads(bucket.blob(PREFIX + "LATEST.json").download_as_bytes())["generation"] == "attempt-1/save-1/"
    assert "the previous checkpoint is kept" not in final.message, final.message
    assert "saving the checkpoint exceeded its budget, max_runtime_s=2 (1 file, 7 B in" in final.message, final.message
    assert "the save completed as it was cut, and is the latest" in final.message, final.message


def test_a_periodic_save_that_lands_after_the_last_save_was_cut_is_not_reported_as_the_last(
        bucket, storage, tmp_path, monkeypatch):
    """The periodic save of epoch 1 writes its manifest over a slow link as the job ends; its stop waits 1 s
    for it, and it lands just after. The last save (epoch 2) is then cut by the job's max_runtime_s: the
    report said "the save completed as it was cut, and is the latest", since a save had landed meanwhile,
    while the rerun restores epoch 1."""
    slow_manifest = storage.state.hold("LATEST.json", "store", after=1)  # (the first: the restore's)
    slow_last = storage.state.hold("save-2/model.pt", "store")
    stop_periodic = Checkpoint.stop_periodic

    def stopped_then_landed(self, wait_s=1.0):
        stop_periodic(self, wait_s)
        threading.Timer(0.3, slow_manifest.release.set).start()

    monkeypatch.setattr(Checkpoint, "stop_periodic", stopped_then_landed)
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = lambda message: [
        ControlMessage(vm=VM, job_id="ck", attempt=1, action=ControlAction.CONFIRM, reason="won")] if (
        isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED) else []
    job = ("import os, pathlib, time\n"
           "d = pathlib.Path(os.environ['ZEN_CHECKPOINT_DIR'])\n"
           "(d / 'model.pt').write_text('epoch 1'); time.sleep(2.0)\n"
           "(d / 'model.tmp').write_text('epoch 2, final'); os.replace(d / 'model.tmp', d / 'model.pt')\n")
    transport.add_start(start_message("ck", command=[sys.executable, "-c", job], max_runtime_s=4,
                                      checkpoint=StartCheckpoint(uri=URI, every=1, max_bytes=10**6)))
    try:
        make_agent(transport, settings(tmp_path, stop_grace_s=0.5)).run()
    finally:
        slow_manifest.release.set()
        slow_last.release.set()
    message = finals(transport)["ck"].message
    latest = json.loads(bucket.blob(PREFIX + "LATEST.json").download_as_bytes())
    assert bucket.blob(PREFIX + latest["generation"] + "model.pt").download_as_bytes() == b"epoch 1"
    assert "saving the checkpoint exceeded its budget" in message
    assert "the previous checkpoint is kept" in message and "is the latest" not in message


def _confirm(job_id: str):
    """Zen's side for one job: its claim confirmed, nothing else said."""
    return lambda m: [ControlMessage(vm=VM, job_id=job_id, attempt=1, action=ControlAction.CONFIRM, reason="won")] if (
        isinstance(m, Heartbeat) and m.status is AgentStatus.CLAIMED) else []


def _stop_after(job_id: str, order: ControlMessage, after_s: float = 2.0):
    """Zen's side: the claim confirmed, then ``order`` (a STOP) answering each RUNNING heartbeat from ``after_s`` on."""
    began = time.monotonic()

    def zen(message):
        running = isinstance(message, Heartbeat) and message.status is AgentStatus.RUNNING
        if running and time.monotonic() - began > after_s:
            return [ControlDelivery(f"c-{time.monotonic()}", order.to_bytes(), {"vm": VM, "answer_within_s": "60"},
                                    lambda: None)]
        return _confirm(job_id)(message)
    return zen


def test_a_periodic_save_whose_files_are_up_after_the_preemption_notice_still_lands(bucket, storage, tmp_path):
    """A spot VM's notice while a periodic save uploads: the last save began by stopping the periodic ones, which
    dropped that save's manifest though its one file was up 1.5 s after the notice; the last save (the state at
    SIGTERM) then ran out of time, and the rerun got the checkpoint before both (epoch 1 for epoch 2)."""
    periodic = storage.state.hold("/save-2/model.pt", "store")  # epoch 2's periodic save: a slow link
    last = storage.state.hold("/save-3/model.pt", "store")  # the state at the notice: no time left for it
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = _confirm("ck")
    transport.add_start(start_message("ck", command=[sys.executable, "-c", JOB.replace("at SIGTERM", "at the notice")],
                                      checkpoint=StartCheckpoint(uri=URI, every=1, max_bytes=10**6)))
    agent = make_agent(transport, settings(tmp_path, stop_grace_s=1))

    def preempted() -> None:
        assert periodic.reached.wait(30)
        agent.request_shutdown("preempted")
        time.sleep(1.5)
        periodic.release.set()

    notice = threading.Thread(target=preempted, daemon=True)
    notice.start()
    try:
        agent.run()
    finally:
        periodic.release.set()
        last.release.set()
    notice.join(10)
    assert finals(transport)["ck"].status is AgentStatus.PREEMPTED
    latest = json.loads(bucket.blob(PREFIX + "LATEST.json").download_as_bytes())
    assert bucket.blob(PREFIX + latest["generation"] + "model.pt").download_as_bytes() in (
        b"epoch 2", b"epoch 3, at the notice")


def test_a_queues_preemption_makes_the_notice_appear_as_a_spot_vms_does(bucket, tmp_path):
    """STOP "preempted: ..." (the job runs again later, ZEN_PREEMPTED=1): ZEN_PREEMPTION_NOTICE never appeared, so
    a job behind a wrapper that does not forward SIGTERM (the file's audience) was killed after its grace without
    saving where it got to, and a job telling a preemption from a user's stop took it for a user's stop."""
    job = ("import os, pathlib, signal, time\n"
           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           "d, notice = pathlib.Path(os.environ['ZEN_CHECKPOINT_DIR']), os.environ['ZEN_PREEMPTION_NOTICE']\n"
           "step = 0\n"
           "while not os.path.exists(notice):\n"
           "    step += 1; time.sleep(0.05)\n"
           "(d / 'step').write_text(str(step))\n")
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = _stop_after("qp", ControlMessage(vm=VM, job_id="qp", attempt=1, action=ControlAction.STOP,
                                                        reason="preempted: queue prod takes back lent quota"))
    transport.add_start(start_message("qp", command=[sys.executable, "-c", job],
                                      checkpoint=StartCheckpoint(uri=checkpoint_uri("ckpt-bkt", "checkpoints",
                                                                                    "4xa100-40gb", "qp"),
                                                                 every=600, max_bytes=10**6)))
    make_agent(transport, settings(tmp_path, stop_grace_s=2)).run()
    assert finals(transport)["qp"].status is AgentStatus.STOPPED
    latest = json.loads(bucket.blob(PREFIX.replace("/ck/", "/qp/") + "LATEST.json").download_as_bytes())
    assert int(bucket.blob(PREFIX.replace("/ck/", "/qp/") + latest["generation"] + "step").download_as_bytes()) > 0


def test_a_save_that_failed_before_a_later_one_landed_is_not_the_reports_word(bucket, tmp_path):
    """A periodic save refused once (over max_bytes), then saves landing: the report of the job, which succeeded
    with its checkpoint up to date, opened with "checkpoint not saved ...; the previous one is kept"."""
    job = ("import os, pathlib, time\n"
           "d = pathlib.Path(os.environ['ZEN_CHECKPOINT_DIR'])\n"
           "(d / 'big').write_bytes(b'x' * 200); time.sleep(1.6)\n"
           "(d / 'big').unlink(); (d / 'model.pt').write_text('epoch 2'); time.sleep(2.5)\n")
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = _confirm("ck")
    transport.add_start(start_message("ck", command=[sys.executable, "-c", job],
                                      checkpoint=StartCheckpoint(uri=URI, every=1, max_bytes=100)))
    make_agent(transport, settings(tmp_path, stop_grace_s=1)).run()
    final = finals(transport)["ck"]
    assert final.status is AgentStatus.SUCCEEDED
    assert [f["path"] for f in json.loads(bucket.blob(PREFIX + "LATEST.json").download_as_bytes())["files"]] == [
        "model.pt"]
    assert not (final.message or "").startswith("checkpoint not saved"), final.message
    assert "zen: checkpoint not saved (every 1 s)" in final.message  # as it was said, in the output's tail


def test_a_users_stop_whose_reason_reads_as_a_preemption_makes_no_notice(bucket, tmp_path):
    """`zen stop --reason "preempted: ..."`: the STOP read as a queue's preemption, and the notice appeared for a
    job that tells the two apart (it saved for a rerun that never comes)."""
    at = datetime(2026, 12, 1, tzinfo=timezone.utc)
    running = Job(job_id="us", status=JobStatus.RUNNING, attempt=1, max_attempts=3, cluster="4xa100-40gb", user_id="u",
                  priority=0, regions=["r"], request={}, request_hash="h", max_runtime_s=600, vm=VM, region="r",
                  zone="r-a", last_seq=2, last_heartbeat_at=at, submitted_at=at, queued_at=at, started_at=at,
                  finished_at=None, exit_code=None, message=None, updated_at=at)
    [order] = lifecycle.decide_stop(running, StopRequest(job_id="us", reason="preempted: moving it elsewhere"),
                                    at).controls
    assert (order.action, order.reason) == (ControlAction.STOP, "stopped: preempted: moving it elsewhere")
    job = ("import os, pathlib, signal, sys, time\n"
           "d, notice = pathlib.Path(os.environ['ZEN_CHECKPOINT_DIR']), os.environ['ZEN_PREEMPTION_NOTICE']\n"
           "def term(*_):\n"
           "    (d / 'seen').write_text('notice' if os.path.exists(notice) else 'a stop'); sys.exit(0)\n"
           "signal.signal(signal.SIGTERM, term)\n"
           "while True: time.sleep(0.05)\n")
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = _stop_after("us", order)
    uri = checkpoint_uri("ckpt-bkt", "checkpoints", "4xa100-40gb", "us")
    transport.add_start(start_message("us", command=[sys.executable, "-c", job],
                                      checkpoint=StartCheckpoint(uri=uri, every=600, max_bytes=10**6)))
    make_agent(transport, settings(tmp_path, stop_grace_s=2)).run()
    assert finals(transport)["us"].status is AgentStatus.STOPPED
    prefix = PREFIX.replace("/ck/", "/us/")
    latest = json.loads(bucket.blob(prefix + "LATEST.json").download_as_bytes())
    assert bucket.blob(prefix + latest["generation"] + "seen").download_as_bytes() == b"a stop"


def test_a_deep_file_left_out_leaves_the_reports_reason_for_the_end(bucket, tmp_path):
    """The left-out note quoted a ~1,000-byte path whole: the final report keeps its preface's last 1,100
    characters, and why the job ended (max_runtime_s) was cut from it."""
    job = ("import os, pathlib, time\n"
           "d = pathlib.Path(os.environ['ZEN_CHECKPOINT_DIR'])\n"
           "deep = d.joinpath(*['d' * 200] * 5); deep.mkdir(parents=True)\n"
           "(deep / 'events.out.tfevents').write_text('x'); (d / 'model.pt').write_text('1')\n"
           "time.sleep(60)\n")
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = _confirm("rr")
    uri = checkpoint_uri("ckpt-bkt", "checkpoints", "4xa100-40gb", "rr")
    transport.add_start(start_message("rr", command=[sys.executable, "-c", job], max_runtime_s=3,
                                      checkpoint=StartCheckpoint(uri=uri, every=1, max_bytes=10**6)))
    make_agent(transport, settings(tmp_path, stop_grace_s=1)).run()
    final = finals(transport)["rr"]
    assert final.status is AgentStatus.FAILED
    assert "killed after exceeding max_runtime_s" in (final.message or ""), (final.message or "")[:300]


def test_a_cut_first_save_does_not_claim_a_previous_checkpoint_is_kept(bucket, storage, tmp_path):
    """A job's first attempt, no checkpoint saved yet, whose last save is cut (here by its budget; a STOP's deadline
    or the VM's shutdown alike): the final report said "...; the previous checkpoint is kept" although there was
    none, and the rerun started from scratch. It says so now."""
    held = storage.state.hold("/save-1/model.pt", "store")  # the last (and first) save: a slow link
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = _confirm("ck")
    try:
        _run_a_save_on_a_budget(transport, tmp_path)
    finally:
        held.release.set()
    final = finals(transport)["ck"]
    assert "generation" not in json.loads(bucket.blob(PREFIX + "LATEST.json").download_as_bytes())  # no save: afresh
    assert "saving the checkpoint exceeded its budget" in final.message, final.message
    assert "the previous checkpoint is kept" not in final.message, final.message
    assert "no checkpoint was saved: the next attempt starts afresh" in final.message, final.message


def test_a_first_save_over_the_limit_does_not_claim_a_previous_checkpoint_is_kept(bucket, tmp_path):
    """No checkpoint before: a save over max_bytes (or one whose upload failed) said "the previous one is kept",
    and the rerun started afresh."""
    job = "import os, pathlib; pathlib.Path(os.environ['ZEN_CHECKPOINT_DIR'], 'model.pt').write_bytes(b'x' * 500)\n"
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = _confirm("ck")
    transport.add_start(start_message("ck", command=[sys.executable, "-c", job],
                                      checkpoint=StartCheckpoint(uri=URI, every=600, max_bytes=100)))
    make_agent(transport, settings(tmp_path, stop_grace_s=0.5)).run()
    message = finals(transport)["ck"].message or ""
    assert "generation" not in json.loads(bucket.blob(PREFIX + "LATEST.json").download_as_bytes())  # no save named
    assert "above the limit of 100 B; no checkpoint was saved: the next attempt starts afresh" in message, message
    assert "kept" not in message, message


# Steps, writing its state whole every 0.2 s; at SIGTERM writes its final state in 25 parts for ~2.5 s, then exits.
NOTICED = ("import os, pathlib, signal, time\n"
           "d = pathlib.Path(os.environ['ZEN_CHECKPOINT_DIR'])\n"
           "def write(name, text):\n"
           "    (d / (name + '.tmp')).write_text(text); os.replace(d / (name + '.tmp'), d / name)\n"
           "stopping = []\n"
           "signal.signal(signal.SIGTERM, lambda *a: stopping.append(1))\n"
           "open(os.environ['READY'], 'w').close()\n"
           "step = 0\n"
           "while not stopping:\n"
           "    step += 1; write('step', str(step)); time.sleep(0.2)\n"
           "for part in range(25):\n"
           "    write(f'final-{part}', 'x' * 1000); time.sleep(0.1)\n")


def test_no_periodic_save_begins_after_the_preemption_notice(bucket, tmp_path, monkeypatch):
    """Periodic saves went on through the stop grace after ZEN_PREEMPTION_NOTICE appeared, each taking the job's
    notice-time write half done (5 of its 25 files, then 17) and its time: none begins now; the last save takes it."""
    began, save = [], Checkpoint.save

    def recorded(self, why, cancel=None):
        began.append((why, self.notice_path.exists()))
        return save(self, why, cancel)

    monkeypatch.setattr(Checkpoint, "save", recorded)
    ready = tmp_path / "ready"
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = _confirm("ck")
    transport.add_start(start_message("ck", command=[sys.executable, "-c", NOTICED], env={"READY": str(ready)},
                                      checkpoint=StartCheckpoint(uri=URI, every=1, max_bytes=10**6)))
    agent = make_agent(transport, settings(tmp_path, stop_grace_s=4))

    def preempt():
        wait_for(ready.exists, timeout_s=30)
        time.sleep(1.5)
        agent.request_shutdown("preempted")

    threading.Thread(target=preempt, daemon=True).start()
    agent.run()
    assert [why for why, noticed in began if noticed and why != "the attempt ended"] == []
    assert ("the attempt ended", True) in began
    assert len(json.loads(bucket.blob(PREFIX + "LATEST.json").download_as_bytes())["files"]) == 26  # step, 25 parts


def test_the_staged_figure_counts_the_inputs_alone_not_the_restored_checkpoint(bucket, storage, tmp_path):
    """A rerun with inputs and a checkpoint: its report said "staged 3 files, 1.0 kB" (the 2 checkpoint files
    counted as inputs read), and its staged_bytes was the inputs' and the checkpoint's together."""
    gcs.Client().create_bucket("data-bkt").blob("corpus/words.txt").upload_from_string(b"alpha beta\n")
    first = Checkpoint(StartCheckpoint(uri=URI, every=600, max_bytes=10**6), tmp_path / "first", 1, gcs.Client)
    first.prepare()
    (first.directory / "step").write_text("41")
    (first.directory / "weights.bin").write_bytes(b"\0" * 1000)
    assert first.save("every 600 s") is True

    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = lambda message: [ControlMessage(vm=VM, job_id="ck", attempt=2, action=ControlAction.CONFIRM,
                                                       reason="won")] if isinstance(message, Heartbeat) and \
        message.status is AgentStatus.CLAIMED else []
    read = "import os, pathlib; print(sorted(os.listdir(os.environ['ZEN_CHECKPOINT_DIR'])))\n"
    transport.add_start(start_message("ck", attempt=2, command=[sys.executable, "-c", read],
                                      inputs=[InputSpec(uri="gs://data-bkt/corpus/words.txt")],
                                      checkpoint=StartCheckpoint(uri=URI, every=600, max_bytes=10**6)))
    make_agent(transport, settings(tmp_path / "vm", stop_grace_s=0.5)).run()

    final = finals(transport)["ck"]
    assert final.status is AgentStatus.SUCCEEDED, final.message
    assert "zen: staged 1 file, 11 B in" in final.message, final.message
    assert final.staged_bytes == 11
    assert "zen: checkpoint restored: 2 files, 1.0 kB saved by attempt 1" in final.message, final.message

