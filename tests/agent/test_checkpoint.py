"""A job's checkpoint on the VM (zen.agent.checkpoint) through the official Cloud Storage client against
the Cloud Storage stand-in: restore, save, a torn save, the size limit, periodic saves."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time

import pytest
from google.cloud import storage as gcs

from tests.waiting import wait_for
from zen.agent import checkpoint_files
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


def lost_and_rerun(tmp_path, client, saved_before: bool, *, max_bytes: int = 10**6):
    """Attempt 1 (lost: it runs on, its output in ``lines``; its own save landed first if ``saved_before``) and its
    rerun, attempt 2, which restored and saved step 7 (the latest). Returns (lost, lines)."""
    lines: list[str] = []
    lost = attempt(tmp_path, client, 1, max_bytes=max_bytes, lines=lines)
    lost.restore(Progress(), threading.Event())
    if saved_before:
        (lost.directory / "step").write_text("5")
        assert lost.save("every 600 s") is True
    rerun = attempt(tmp_path, client, 2)
    rerun.restore(Progress(), threading.Event())
    (rerun.directory / "step").write_text("7")
    assert rerun.save("every 600 s") is True
    return lost, lines


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
    assert [(f["path"], f["size"]) for f in manifest(client)["files"]] == [("model/weights.bin", 1000), ("step", 2)]
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
    assert names(client) == [PREFIX + MANIFEST, PREFIX + "attempt-1/save-1/model/weights.bin",
                             PREFIX + "attempt-2/save-1/step"]  # the save before's objects not named again are deleted
    assert lines[-1].endswith("; 1 unchanged file(s) kept from the save before")  # as restored: its object named again


def test_a_restored_file_keeps_its_modification_time(tmp_path, client):
    """A job that resumes from its newest file by time (``max(glob, key=getmtime)``): restored files had the
    time of their download, in name order, so step-9.pt came out newer than step-10.pt."""
    first = attempt(tmp_path, client, 1)
    for step, at in ((10, 2_000_000_000), (9, 1_000_000_000)):
        (first.directory / f"step-{step}.pt").write_text(str(step))
        os.utime(first.directory / f"step-{step}.pt", ns=(at * 10**9, at * 10**9))
    assert first.save("every 600 s") is True
    second = attempt(tmp_path, client, 2)
    second.restore(Progress(), threading.Event())
    assert {p.name: p.stat().st_mtime_ns for p in second.directory.iterdir()} == {
        "step-10.pt": 2_000_000_000 * 10**9, "step-9.pt": 1_000_000_000 * 10**9}
    assert second.save("the attempt ended") is False  # as restored: nothing to save


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
    """A lost attempt runs on until its fence falls while its rerun starts elsewhere: both save (the lost one's saves
    are dropped once the rerun restored, even none)."""
    lost, rerun = attempt(tmp_path, client, 1), attempt(tmp_path, client, 2)
    (lost.directory / "step").write_text("5")
    lost.restore(Progress(), threading.Event())
    rerun.restore(Progress(), threading.Event())
    with pytest.raises(TransferError, match=r"attempt 2 of the job has started since, finding no checkpoint, whose"):
        lost.save("every 600 s")  # after the rerun restored (none): dropped
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


def in_thread(call, *args) -> tuple[threading.Thread, list]:
    """``call(*args)`` in a thread of its own; the list gets what it returned or raised."""
    got: list = []

    def run():
        try:
            got.append(call(*args))
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            got.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, got


def test_a_save_cut_while_its_last_file_uploads_writes_no_manifest(tmp_path, client, storage):
    """The cut (the fence, Zen's stop deadline, the shutdown) comes while the save's only file is on its
    way: once that upload ends, the manifest still names the save before, as the report said."""
    first = attempt(tmp_path, client, 1)
    (first.directory / "model.pt").write_text("epoch 1")
    first.save("every 600 s")
    (first.directory / "model.pt").write_text("epoch 2")
    held, cut = storage.state.hold("/save-2/model.pt", "store"), threading.Event()
    thread, got = in_thread(first.save, "the attempt ended", cut)
    assert held.reached.wait(10)
    cut.set()
    held.release.set()
    thread.join(10)
    assert isinstance(got[0], TransferError) and "cut before its manifest was written" in str(got[0])
    assert manifest(client)["generation"] == "attempt-1/save-1/"


def test_no_save_writes_once_the_attempt_has_ended(tmp_path, client, storage):
    """A periodic save is uploading when the job is stopped; the last save waits for it and is cut; the
    attempt reports "the previous checkpoint is kept", its folder goes, and only then does the upload
    end: neither save may write the manifest (an empty folder would have made an empty checkpoint)."""
    first = attempt(tmp_path, client, 1)
    (first.directory / "model.pt").write_text("epoch 1")
    first.save("every 600 s")
    (first.directory / "model.pt").write_text("epoch 2")
    held = storage.state.hold("/save-2/model.pt", "store")
    periodic, _ = in_thread(first._quietly, "every 600 s", first._stop)
    assert held.reached.wait(10)
    cancel = threading.Event()
    final, got = in_thread(first.save, "the attempt ended", cancel)  # waits for the periodic save's lock
    final.join(0.5)
    cancel.set()  # the transfer's cut
    assert first.close() is True  # no manifest under way: the periodic save is still uploading
    shutil.rmtree(first.directory.parent)  # the attempt's folders removed
    held.release.set()
    periodic.join(10)
    final.join(10)
    assert got == [False]
    assert manifest(client)["generation"] == "attempt-1/save-1/"
    rerun = attempt(tmp_path, client, 2)
    rerun.restore(Progress(), threading.Event())
    assert (rerun.directory / "model.pt").read_text() == "epoch 1"
    assert first.save("every 600 s") is False  # closed, and its folder is gone


def test_a_rerun_restores_the_save_that_landed_while_it_read_the_one_before(tmp_path, client, storage):
    """An earlier attempt, still running until its fence falls, saves while the rerun downloads the files of
    the save before (which that save deletes): the rerun restores the new one, makes the checkpoint its own,
    and the earlier attempt's next save is dropped."""
    lost = attempt(tmp_path, client, 1)
    (lost.directory / "model.pt").write_text("epoch 1")
    lost.save("every 600 s")
    (lost.directory / "model.pt").write_text("epoch 2")
    lines: list[str] = []
    rerun = attempt(tmp_path, client, 2, lines=lines)
    held = storage.state.hold("/save-1/model.pt", "read")
    thread, got = in_thread(rerun.restore, Progress(), threading.Event())
    assert held.reached.wait(10)
    assert lost.save("every 600 s") is True  # save-2 named, save-1's files deleted
    held.release.set()
    thread.join(10)
    assert got == [None]
    assert (rerun.directory / "model.pt").read_text() == "epoch 2"
    assert lines[-1].startswith("zen: checkpoint restored: 1 file, ") and "saved by attempt 1" in lines[-1]
    assert manifest(client)["attempt"] == 2 and manifest(client)["saved_by"] == 1

    (lost.directory / "model.pt").write_text("epoch 3")
    with pytest.raises(TransferError, match=r"attempt 2 of the job restored this attempt's checkpoint since, which"):
        lost.save("the attempt ended")  # (the save it restored, this attempt's: attempt 2 saved none)
    third = attempt(tmp_path, client, 3)
    third.restore(Progress(), threading.Event())
    assert (third.directory / "model.pt").read_text() == "epoch 2"


def test_an_earlier_attempt_restoring_after_a_later_one_saved_saves_nothing(tmp_path, client):
    rerun = attempt(tmp_path, client, 2)
    (rerun.directory / "step").write_text("7")
    rerun.save("every 600 s")
    lines: list[str] = []
    lost = attempt(tmp_path, client, 1, lines=lines)
    lost.restore(Progress(), threading.Event())
    assert (lost.directory / "step").read_text() == "7"
    assert "zen: attempt 2 of the job saved its checkpoint since: this attempt saves none" in lines
    (lost.directory / "step").write_text("8")
    assert lost.save("every 600 s") is False
    assert manifest(client)["attempt"] == 2 and manifest(client)["generation"] == "attempt-2/save-1/"


def test_a_checkpoint_whose_files_are_gone_for_good_is_said_and_the_job_starts_afresh(tmp_path, client):
    first = attempt(tmp_path, client, 1)
    (first.directory / "model.pt").write_text("epoch 1")
    first.save("every 600 s")
    client.bucket("ckpt-bkt").delete_blob(PREFIX + "attempt-1/save-1/model.pt")  # the bucket's lifecycle
    lines: list[str] = []
    rerun = attempt(tmp_path, client, 2, lines=lines)
    rerun.restore(Progress(), threading.Event())
    assert list(rerun.directory.iterdir()) == []
    assert lines == ["zen: checkpoint file model.pt is gone (a checkpoint's objects are deleted "
                     "checkpoint_retention_days after they were written): the job starts afresh"]


def test_a_file_whose_name_cloud_storage_cannot_hold_is_left_out_said_once_and_the_rest_saved(tmp_path, client):
    """One stray file whose name is not UTF-8 sent every save to Cloud Storage, which refused it after the files
    before it were uploaded (and deleted again): no save ever landed, and a rerun got nothing."""
    lines: list[str] = []
    first = attempt(tmp_path, client, 1, lines=lines)
    (first.directory / "model.pt").write_text("epoch 1")
    os.close(os.open(os.fsencode(first.directory) + b"/tok\xff.cache", os.O_CREAT | os.O_WRONLY))
    (first.directory / "line\nbreak").write_text("x")
    assert first.save("every 600 s") is True
    assert [f["path"] for f in manifest(client)["files"]] == ["model.pt"]
    left_out = [line for line in lines if "left out of the checkpoint" in line]
    assert sorted(left_out) == [
        "zen: checkpoint file 'line\\nbreak' is left out of the checkpoint: its name holds a line break, which Cloud "
        "Storage's may not",
        "zen: checkpoint file 'tok\\xff.cache' is left out of the checkpoint: its name is not UTF-8, which Cloud "
        "Storage's may not"]
    (first.directory / "model.pt").write_text("epoch 2")
    assert first.save("every 600 s") is True
    assert len([line for line in lines if "left out of the checkpoint" in line]) == 2  # said once each
    assert len(first.notes) == 2


@pytest.mark.parametrize("listed, gone", [
    ("", r"folder .*ckpt-100 went"),  # just after the top was read: the folder goes before its own listing
    ("ckpt-100", r"ckpt-100/model.pt went"),  # just after ckpt-100 was read: its file goes before it is looked at
])
def test_a_save_listing_the_folder_as_the_job_swaps_checkpoint_folders_is_dropped(tmp_path, client, monkeypatch,
                                                                                  listed, gone):
    """The job writes ckpt-200/ whole and removes ckpt-100/ (as trainers keeping their last N checkpoints do) while
    the save lists the folder: what went was skipped without a word, the save landed with config.json alone,
    deleted the save before it, and the rerun restored no model as if the checkpoint were whole. Now that save
    is dropped and the one before stays."""
    first = attempt(tmp_path, client, 1)
    folder = first.directory
    (folder / "ckpt-100").mkdir()
    (folder / "ckpt-100" / "model.pt").write_text("step 100")
    (folder / "config.json").write_text("{}")
    assert first.save("every 600 s") is True
    walk, swapped = checkpoint_files.walk, []

    def swap_as_listed(top, *args, **kwargs):
        for entry in walk(top, *args, **kwargs):
            if entry[0] == listed and not swapped:  # read: the job's next checkpoint lands
                swapped.append(True)
                (folder / "ckpt-200.tmp").mkdir()
                (folder / "ckpt-200.tmp" / "model.pt").write_text("step 200")
                os.rename(folder / "ckpt-200.tmp", folder / "ckpt-200")
                shutil.rmtree(folder / "ckpt-100")
            yield entry

    monkeypatch.setattr(checkpoint_files, "walk", swap_as_listed)
    with pytest.raises(TransferError, match=r"checkpoint not saved \(every 600 s\): " + gone +
                                            r" while ZEN_CHECKPOINT_DIR was listed; the previous one is kept"):
        first.save("every 600 s")
    monkeypatch.setattr(checkpoint_files, "walk", walk)
    assert sorted(f["path"] for f in manifest(client)["files"]) == ["ckpt-100/model.pt", "config.json"]
    assert any(name.endswith("/ckpt-100/model.pt") for name in names(client))  # its files kept
    assert first.save("every 600 s") is True  # the next save lists it whole
    rerun = attempt(tmp_path, client, 2)
    rerun.restore(Progress(), threading.Event())
    assert sorted(p.relative_to(rerun.directory).as_posix() for p in rerun.directory.rglob("*") if p.is_file()) == [
        "ckpt-200/model.pt", "config.json"]


def test_a_file_whose_object_name_would_pass_cloud_storages_limit_is_left_out_not_every_save_failed(tmp_path, client):
    """Cloud Storage refuses an object name over 1,024 bytes, as one with a line break: one file deep in a
    tree (here its object's name 1,071 bytes) would fail every save. It is left out and said once, as those are."""
    lines: list[str] = []
    first = attempt(tmp_path, client, 1, lines=lines)
    (first.directory / "model.pt").write_text("epoch 1")
    deep = first.directory.joinpath(*["d" * 200] * 5)
    deep.mkdir(parents=True)
    (deep / "events.out.tfevents").write_text("x")
    assert first.save("every 600 s") is True
    assert [f["path"] for f in manifest(client)["files"]] == ["model.pt"]
    assert max(len(n.encode()) for n in names(client)) <= checkpoint_files.MAX_OBJECT_NAME
    [said] = [line for line in lines if "left out of the checkpoint" in line]  # its ends (a whole path filled the
    assert said == (f"zen: checkpoint file '{'d' * 70}...{'d' * 50}/events.out.tfevents' is left out of the "  # report)
                    "checkpoint: its name is 1,024 bytes: with the checkpoint's prefix (as long as any attempt's and save's), "
                    "its object's name could pass Cloud Storage's 1,024")


def test_every_save_and_attempt_leaves_out_the_same_files(tmp_path, client):
    """A deep file's room counted for the save being written changed with its number: a file saves 1-9 held was
    left out from save 10 on, and one attempt 9 saved by attempt 10, which deleted it with the save before."""
    ninth = attempt(tmp_path, client, 9)
    widest = "checkpoints/4xa100-40gb/job-1/attempt-1000000/save-1000000000/"
    path = ["d" * 199] * 4 + ["f" * (checkpoint_files.MAX_OBJECT_NAME - len(widest) - 800)]  # exactly the room
    ninth.directory.joinpath(*path[:-1]).mkdir(parents=True)
    ninth.directory.joinpath(*path).write_text("weights")
    for step in range(10):
        (ninth.directory / "step").write_text(str(step))
        assert ninth.save("every 600 s") is True
        assert "/".join(path) in [f["path"] for f in manifest(client)["files"]], step
    tenth = attempt(tmp_path, client, 10)
    tenth.restore(Progress(), threading.Event())
    (tenth.directory / "step").write_text("10")
    assert tenth.save("every 600 s") is True
    assert "/".join(path) in [f["path"] for f in manifest(client)["files"]]


def test_an_empty_folder_comes_back_with_the_checkpoint(tmp_path, client):
    first = attempt(tmp_path, client, 1)
    (first.directory / "logs" / "old").mkdir(parents=True)
    (first.directory / "state").write_text("step 5")
    assert first.save("every 600 s") is True
    assert manifest(client)["folders"] == ["logs/old"]
    second = attempt(tmp_path, client, 2)
    second.restore(Progress(), threading.Event())
    assert (second.directory / "logs" / "old").is_dir() and (second.directory / "state").read_text() == "step 5"
    # A manifest naming a folder out of the checkpoint is refused as any bad path is.
    blob = client.bucket("ckpt-bkt").blob(PREFIX + MANIFEST)
    blob.upload_from_string(json.dumps({**manifest(client), "folders": ["../escape"]}))
    with pytest.raises(TransferError, match="bad checkpoint path"):
        attempt(tmp_path, client, 3).restore(Progress(), threading.Event())


def _host_folder(tmp_path):
    host = tmp_path / "host-etc"  # stands for a folder of the VM that the agent (root) may read and the job may not
    host.mkdir()
    (host / "shadow").write_text("root:$6$secret")
    return host


def restored_files(tmp_path, client, n: int) -> dict[str, str]:
    rerun = attempt(tmp_path, client, n)
    rerun.restore(Progress(), threading.Event())
    return {p.relative_to(rerun.directory).as_posix(): p.read_text() for p in rerun.directory.rglob("*") if p.is_file()}


def test_a_folder_swapped_for_a_link_while_the_save_lists_it_is_not_followed(tmp_path, client, monkeypatch):
    """The job renames logs/ and puts a link to a VM folder in its place between the listing of its parent and
    its own: the walk (os.walk) followed it, the save landed with the VM's files, and the job's next attempt got
    them in its ZEN_CHECKPOINT_DIR. Now that save is dropped, and the one before stays."""
    host, first = _host_folder(tmp_path), attempt(tmp_path, client, 1)
    (first.directory / "model.pt").write_text("epoch 1")
    (first.directory / "logs").mkdir()
    (first.directory / "logs" / "x").write_text("x")
    assert first.save("every 600 s") is True
    (first.directory / "model.pt").write_text("epoch 2")
    opened = checkpoint_files._opened

    def swapped_first(name, parent, shown, *inner):
        if name == "logs" and not (first.directory / "logs").is_symlink():  # the job's rename lands right now
            os.rename(first.directory / "logs", first.directory / "logs.old")
            os.symlink(host, first.directory / "logs")
        return opened(name, parent, shown, *inner)

    monkeypatch.setattr(checkpoint_files, "_opened", swapped_first)
    with pytest.raises(TransferError, match="logs was replaced by a link while ZEN_CHECKPOINT_DIR was listed"):
        first.save("every 600 s")
    monkeypatch.setattr(checkpoint_files, "_opened", opened)
    assert sorted(f["path"] for f in manifest(client)["files"]) == ["logs/x", "model.pt"]  # the save before
    assert first.save("every 600 s") is True  # listed again: the link is left out, as every link
    assert restored_files(tmp_path, client, 2) == {"model.pt": "epoch 2", "logs.old/x": "x"}


def test_a_folder_swapped_for_a_link_after_the_listing_is_not_uploaded_through_it(tmp_path, client, monkeypatch):
    """Between the listing and the upload: each file's identity is checked as it is opened (its path's folders are
    not opened without links), so the VM's file under the same name is not what was listed."""
    host, first = _host_folder(tmp_path), attempt(tmp_path, client, 1)
    (first.directory / "logs").mkdir()
    (first.directory / "logs" / "shadow").write_text("the job's own file")
    listing, calls = first.files, []

    def then_swapped():  # after the save's listings (it lists twice: zen.agent.checkpoint.Checkpoint.save)
        listed = listing()
        calls.append(listed)
        if len(calls) == 2:
            os.rename(first.directory / "logs", first.directory / "logs.old")
            os.symlink(host, first.directory / "logs")
        return listed

    monkeypatch.setattr(first, "files", then_swapped)
    with pytest.raises(TransferError, match="logs/shadow changed while it was saved"):
        first.save("every 600 s")
    assert "secret" not in "".join(restored_files(tmp_path, client, 2).values())


def test_a_checkpoint_folder_replaced_by_a_link_saves_nothing_of_what_it_points_at(tmp_path, client):
    host, first = _host_folder(tmp_path), attempt(tmp_path, client, 1)
    (first.directory / "model.pt").write_text("epoch 1")
    assert first.save("every 600 s") is True
    shutil.rmtree(first.directory)
    first.directory.symlink_to(host)
    with pytest.raises(TransferError, match="was replaced by a link"):
        first.save("the attempt ended")
    assert restored_files(tmp_path, client, 2) == {"model.pt": "epoch 1"}


def test_an_empty_folder_made_or_removed_alone_is_saved(tmp_path, client):
    """Saves compared the files alone: a job's empty phase-2-done/ made after a save was never saved (nothing
    changed, it said), nor a checkpoint of empty folders alone, which the docs say are kept by name."""
    first = attempt(tmp_path, client, 1)
    first.restore(Progress(), threading.Event())
    (first.directory / "stage-a").mkdir()
    assert first.save("every 600 s") is True  # empty folders alone
    assert manifest(client)["folders"] == ["stage-a"] and manifest(client)["files"] == []
    (first.directory / "state").write_text("1")
    assert first.save("every 600 s") is True
    (first.directory / "phase-2-done").mkdir()
    assert first.save("every 600 s") is True
    assert first.save("every 600 s") is False  # unchanged since
    second = attempt(tmp_path, client, 2)
    second.restore(Progress(), threading.Event())
    assert (second.directory / "phase-2-done").is_dir() and (second.directory / "stage-a").is_dir()
    (second.directory / "phase-2-done").rmdir()
    assert second.save("every 600 s") is True
    assert manifest(client)["folders"] == ["stage-a"]
