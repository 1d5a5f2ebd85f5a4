"""A checkpoint's folders come back with the modification times they had when saved: a job that keeps one folder
per checkpoint (``checkpoint-9/``, ``checkpoint-10/``) and resumes from the newest by time
(``max(os.listdir(d), key=getmtime)``) found, after a restore, the folders' times of their download, in name order:
``checkpoint-9/`` newer than ``checkpoint-10/``, and the rerun resumed from the older checkpoint. The official client
against the Cloud Storage stand-in."""

from __future__ import annotations

import json
import os
import threading

from tests.agent.test_checkpoint import PREFIX, attempt, manifest
from tests.agent.test_checkpoint import client  # noqa: F401 - fixture
from zen.agent.checkpoint import MANIFEST
from zen.agent.staging import Progress

SAVED = {"checkpoint-10": 2_000_000_000 * 10**9, "checkpoint-9": 1_000_000_000 * 10**9,
         "checkpoint-10/optimizer": 1_900_000_000 * 10**9}


def _write(directory) -> None:
    """checkpoint-9/ written long before checkpoint-10/ (and its optimizer/ folder), each file as old as its folder."""
    for folder in ("checkpoint-9", "checkpoint-10/optimizer"):
        (directory / folder).mkdir(parents=True)
    for name in ("checkpoint-9/model.pt", "checkpoint-10/model.pt", "checkpoint-10/optimizer/state.pt"):
        (directory / name).write_text(name)
        at = SAVED[name.rsplit("/", 1)[0]]
        os.utime(directory / name, ns=(at, at))
    for folder in ("checkpoint-10/optimizer", "checkpoint-10", "checkpoint-9"):  # the deepest first
        os.utime(directory / folder, ns=(SAVED[folder], SAVED[folder]))


def test_a_restored_checkpoint_folder_keeps_its_modification_time(tmp_path, client):  # noqa: F811
    first = attempt(tmp_path, client, 1)
    _write(first.directory)
    assert first.save("every 600 s") is True
    second = attempt(tmp_path, client, 2)
    second.restore(Progress(), threading.Event())

    restored = {folder: (second.directory / folder).stat().st_mtime_ns for folder in SAVED}
    assert restored == SAVED
    newest = max(os.listdir(second.directory), key=lambda name: os.path.getmtime(second.directory / name))
    assert newest == "checkpoint-10"
    assert second.save("the attempt ended") is False  # as restored: nothing to save


def test_a_folders_time_alone_changed_is_no_new_save_and_a_manifest_without_times_restores(tmp_path, client):  # noqa: F811
    """A folder's time follows its files (a temporary file made and removed in it changes it alone: no save); a
    manifest written before folders had times restores as before."""
    first = attempt(tmp_path, client, 1)
    _write(first.directory)
    assert first.save("every 600 s") is True
    (first.directory / "checkpoint-9" / "x.tmp").write_text("x")
    (first.directory / "checkpoint-9" / "x.tmp").unlink()
    assert first.save("every 600 s") is False

    older = {key: value for key, value in manifest(client).items() if key != "folder_times"}
    client.bucket("ckpt-bkt").blob(PREFIX + MANIFEST).upload_from_string(json.dumps(older))
    second = attempt(tmp_path, client, 2)
    second.restore(Progress(), threading.Event())
    assert (second.directory / "checkpoint-10" / "optimizer" / "state.pt").read_text() == (
        "checkpoint-10/optimizer/state.pt")
