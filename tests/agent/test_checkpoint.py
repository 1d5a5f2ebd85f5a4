"""A job's checkpoint on the VM (zen.agent.checkpoint) through the official Cloud Storage client against
the Cloud Storage stand-in: restore, save, a torn save, the size limit, periodic saves."""

from __future__ import annotations

import json
import threading
import time

import pytest
from google.cloud import storage as gcs

from tests.waiting import wait_for
from zen.agent.checkpoint import MANIFEST, Checkpoint
from zen.agent.staging import Progress, TransferError
from zen.core.checkpoints import StartCheckpoint, checkpoint_uri

URI = checkpoint_uri("ckpt-bkt", "checkpoints", "4xa100-40gb", "job-1")
PREFIX = "checkpoints/4xa100-40gb/job-1/"


@pytest.fixture
def client(storage):
    client = gcs.Client()
    client.create_bucket("ckpt-bkt")
    return client


def attempt(tmp_path, client, n: int, *, every: int = 600, max_bytes: int = 10**6, lines: list | None = None):
    said = lines if lines is not None else []
    checkpoint = Checkpoint(StartCheckpoint(uri=URI, every=every, max_bytes=max_bytes), tmp_path / f"attempt-{n}", n,
                            lambda: client, say=said.append)
    checkpoint.prepare()
    return checkpoint


def manifest(client) -> dict:
    return json.loads(client.bucket("ckpt-bkt").blob(PREFIX + MANIFEST).download_as_bytes())


def names(client) -> list[str]:
    return sorted(blob.name for blob in client.list_blobs("ckpt-bkt"))


def test_a_checkpoint_saved_by_one_attempt_is_restored_by_the_next(tmp_path, client):
    lines: list[str] = []
    first = attempt(tmp_path, client, 1, lines=lines)
    first.restore(Progress(), threading.Event())
    assert list(first.directory.iterdir()) == []
    assert lines == ["zen: no checkpoint saved yet: the job starts afresh"]
    assert first.env() == {"ZEN_CHECKPOINT_DIR": str(first.directory), "ZEN_PREEMPTION_NOTICE": str(first.notice_path)}
    (first.directory / "step").write_text("41")
    (first.directory / "model").mkdir()
    (first.directory / "model" / "weights.bin").write_bytes(b"\0" * 1000)
    (first.directory / "link").symlink_to("/etc/passwd")  # never followed nor saved

    assert first.save("every 600 s") is True
    assert first.save("every 600 s") is False  # unchanged: not saved again
    assert manifest(client)["files"] == [{"path": "model/weights.bin", "size": 1000}, {"path": "step", "size": 2}]
    assert lines[-1].startswith("zen: checkpoint saved (every 600 s): 2 files, ")

    second = attempt(tmp_path, client, 2, lines=lines)
    progress = Progress()
    second.restore(progress, threading.Event())
    assert (second.directory / "step").read_text() == "41"
    assert (second.directory / "model" / "weights.bin").read_bytes() == b"\0" * 1000
    assert not (second.directory / "link").exists()
    assert (progress.files, progress.bytes) == (2, 1002)
    assert lines[-1].startswith("zen: checkpoint restored: 2 files, ") and "saved by attempt 1" in lines[-1]
    assert second.save("the attempt ended") is False  # as restored: nothing to save

    (second.directory / "step").write_text("42")
    assert second.save("the attempt ended") is True
    assert manifest(client)["generation"] == "attempt-2/save-1/"
    assert names(client) == [PREFIX + MANIFEST, PREFIX + "attempt-2/save-1/model/weights.bin",
                             PREFIX + "attempt-2/save-1/step"]  # the save before is deleted once replaced


def test_a_torn_save_keeps_the_checkpoint_before_it(tmp_path, client):
    first = attempt(tmp_path, client, 1)
    (first.directory / "a").write_text("old a")
    (first.directory / "b").write_text("old b")
    first.save("first")

    second = attempt(tmp_path, client, 2)
    second.restore(Progress(), threading.Event())
    (second.directory / "a").write_text("new a")
    (second.directory / "b").write_text("new b")
    real = client.bucket

    class Torn:  # the VM goes away after the first file: the second upload fails
        def __init__(self, name):
            self.bucket = real(name)

        def blob(self, name):
            if name.endswith("/b"):
                raise ConnectionError("the VM went away")
            return self.bucket.blob(name)

        def __getattr__(self, name):
            return getattr(self.bucket, name)

    client.bucket = Torn
    with pytest.raises(TransferError, match=r"checkpoint not saved \(preempted\): .*the previous one is kept"):
        second.save("preempted")
    client.bucket = real

    third = attempt(tmp_path, client, 3)
    third.restore(Progress(), threading.Event())
    assert (third.directory / "a").read_text() == "old a" and (third.directory / "b").read_text() == "old b"
    assert not any("attempt-2" in name for name in names(client))  # the torn save's file is gone too


def test_a_cut_save_keeps_the_checkpoint_before_it(tmp_path, client):
    first = attempt(tmp_path, client, 1)
    (first.directory / "a").write_text("old")
    first.save("first")
    (first.directory / "a").write_text("new")
    cut = threading.Event()
    cut.set()
    with pytest.raises(TransferError, match="cut after 0 of 1 files"):
        first.save("the attempt ended", cut)
    assert manifest(client)["generation"] == "attempt-1/save-1/"


def test_a_checkpoint_over_the_size_limit_is_not_saved_and_the_previous_one_is_kept(tmp_path, client):
    first = attempt(tmp_path, client, 1, max_bytes=100)
    (first.directory / "small").write_bytes(b"x" * 50)
    first.save("first")
    (first.directory / "big").write_bytes(b"x" * 80)
    with pytest.raises(TransferError, match=r"holds 130 B, above the limit of 100 B; the previous one is kept"):
        first.save("every 600 s")
    assert [f["path"] for f in manifest(client)["files"]] == ["small"]


def test_periodic_saves_run_beside_the_job_and_note_what_failed(tmp_path, client):
    lines: list[str] = []
    first = attempt(tmp_path, client, 1, every=1, max_bytes=100, lines=lines)
    first.start_periodic()
    try:
        (first.directory / "step").write_text("1")
        wait_for(lambda: first.saves == 1, what="a periodic save", timeout_s=5)
        (first.directory / "step").write_text("2")
        wait_for(lambda: first.saves == 2, what="a second periodic save", timeout_s=5)
        (first.directory / "big").write_bytes(b"x" * 200)
        wait_for(lambda: first.notes, what="the over-size note", timeout_s=5)
    finally:
        first.stop_periodic()
    assert first.notes[0].startswith("checkpoint not saved (every 1 s): ZEN_CHECKPOINT_DIR holds 201 B")
    assert "zen: " + first.notes[0] in lines
    assert manifest(client)["generation"] == "attempt-1/save-2/"


def test_the_notice_file_appears(tmp_path, client):
    first = attempt(tmp_path, client, 1)
    assert not first.notice_path.exists()
    first.notice()
    assert abs(float(first.notice_path.read_text()) - time.time()) < 5


def test_an_unreadable_manifest_is_the_jobs_failure_and_an_unreachable_service_is_not(tmp_path, client):
    from zen.agent.staging import Unavailable

    client.bucket("ckpt-bkt").blob(PREFIX + MANIFEST).upload_from_string(b'{"generation": "x/", "files": [{"path": "../etc"}]}')
    with pytest.raises(TransferError, match=r"LATEST.json cannot be read") as raised:
        attempt(tmp_path, client, 1).restore(Progress(), threading.Event())
    assert not isinstance(raised.value, Unavailable)

    from google.api_core.exceptions import ServiceUnavailable

    class Down:  # Cloud Storage answering 503 after the client's retries
        def bucket(self, name):
            raise ServiceUnavailable("backend down")

    checkpoint = Checkpoint(StartCheckpoint(uri=URI, every=600, max_bytes=100), tmp_path / "attempt-2", 2, Down)
    checkpoint.prepare()
    with pytest.raises(Unavailable, match=r"checkpoint gs://ckpt-bkt/checkpoints/4xa100-40gb/job-1/: 503"):
        checkpoint.restore(Progress(), threading.Event())


def test_an_earlier_attempt_never_writes_over_a_later_attempts_checkpoint(tmp_path, client):
    """A lost attempt runs on until its fence falls while its rerun starts elsewhere: both save."""
    lost, rerun = attempt(tmp_path, client, 1), attempt(tmp_path, client, 2)
    (lost.directory / "step").write_text("5")
    lost.restore(Progress(), threading.Event())
    rerun.restore(Progress(), threading.Event())
    assert lost.save("every 600 s") is True  # after the rerun restored: the rerun writes over it
    (rerun.directory / "step").write_text("7")
    assert rerun.save("every 600 s") is True
    assert manifest(client)["attempt"] == 2

    (lost.directory / "step").write_text("6")
    with pytest.raises(TransferError, match=r"attempt 2 of the job saved its checkpoint since, which stays the latest"):
        lost.save("the attempt ended")
    assert manifest(client)["attempt"] == 2
    assert not any("attempt-1/" in name for name in names(client))  # the dropped save's files are gone

    third = attempt(tmp_path, client, 3)
    third.restore(Progress(), threading.Event())
    assert (third.directory / "step").read_text() == "7"
