"""A save dropped after its manifest was written keeps its files: the manifest (or a later attempt's take-over
of it) names them, and the next attempt restores them. Against the storage stand-in, through the official
client; the manifest's write is wrapped to lose its answer."""

from __future__ import annotations

import threading
from typing import Callable

import pytest

from tests.agent.test_checkpoint import attempt, client, manifest  # noqa: F401 (client: a fixture)
from zen.agent.checkpoint import MANIFEST
from zen.agent.staging import Progress, TransferError


def manifest_write_wrapped(client, after_landing: Callable[[Callable[..., None], tuple, dict], None],
                           land_first: bool = True) -> Callable[[], None]:
    """From now on the manifest's upload lands, then ``after_landing(upload, args, kwargs)`` runs (it decides
    what the writer hears; without ``land_first`` it alone sends the upload, or not); returns the call that undoes
    it."""
    real = client.bucket

    class Bucket:
        def __init__(self, name):
            self._bucket = real(name)

        def blob(self, name):
            blob = self._bucket.blob(name)
            if name.endswith(MANIFEST):
                upload = blob.upload_from_string

                def landed(*args, **kwargs):
                    if land_first:
                        upload(*args, **kwargs)
                    after_landing(upload, args, kwargs)
                blob.upload_from_string = landed
            return blob

        def __getattr__(self, name):
            return getattr(self._bucket, name)

    client.bucket = Bucket

    def undo() -> None:
        client.bucket = real
    return undo


def restored(tmp_path, client, n: int) -> tuple[str | None, list[str]]:
    lines: list[str] = []
    rerun = attempt(tmp_path, client, n, lines=lines)
    rerun.restore(Progress(), threading.Event())
    path = rerun.directory / "model.pt"
    return (path.read_text() if path.exists() else None), lines


def test_a_save_whose_manifest_landed_with_its_answer_lost_keeps_its_files(tmp_path, client):
    first = attempt(tmp_path, client, 1)
    (first.directory / "model.pt").write_text("epoch 1")
    assert first.save("every 600 s")
    (first.directory / "model.pt").write_text("epoch 2")

    def answer_lost(upload, args, kwargs):
        raise ConnectionError("connection reset before the answer")
    undo = manifest_write_wrapped(client, answer_lost)
    with pytest.raises(TransferError):
        first.save("the attempt ended")
    undo()

    assert manifest(client)["generation"] == "attempt-1/save-2/"
    assert restored(tmp_path, client, 2)[0] == "epoch 2"


def test_a_retry_refused_after_a_later_attempt_took_the_save_over_keeps_its_files(tmp_path, client):
    """A lost attempt's manifest lands, its answer is lost; the rerun restores that save and makes the manifest
    its own; the client's retry is refused (412). The dropped save must not delete the files the rerun's
    manifest names: a third attempt (the rerun saved nothing) restores them."""
    lost = attempt(tmp_path, client, 1)
    (lost.directory / "model.pt").write_text("epoch 1")
    assert lost.save("every 600 s")
    (lost.directory / "model.pt").write_text("epoch 2")
    rerun = attempt(tmp_path, client, 2)

    def taken_over_then_retried(upload, args, kwargs):
        undo()
        rerun.restore(Progress(), threading.Event())
        upload(*args, **kwargs)  # the retry, under the same precondition
    undo = manifest_write_wrapped(client, taken_over_then_retried)
    with pytest.raises(TransferError, match="attempt 2 of the job restored this attempt's checkpoint since"):
        lost.save("every 600 s")
    undo()

    assert manifest(client)["attempt"] == 2
    text, lines = restored(tmp_path, client, 3)
    assert text == "epoch 2", lines
