"""A rerun whose checkpoint's files are gone for good (the bucket's lifecycle deleted them) starts afresh, as a rerun
that found none does, and claims the manifest as that one does (``checkpoint_objects.claim``): it left the manifest
as it was, so the attempt Zen took for lost, still running until its fence falls, landed a save over it (its
``ifGenerationMatch`` still held); the rerun's own save failing then said "starts afresh" while the next attempt
restored the superseded attempt's files. The official client against the Cloud Storage stand-in."""

from __future__ import annotations

import threading

import pytest

from tests.agent.test_checkpoint import PREFIX, attempt, manifest
from tests.agent.test_checkpoint import client  # noqa: F401 - fixture
from zen.agent.staging import Progress, TransferError


def test_a_rerun_whose_checkpoints_files_are_gone_claims_the_manifest(tmp_path, client):  # noqa: F811
    lost = attempt(tmp_path, client, 1)
    lost.restore(Progress(), threading.Event())
    (lost.directory / "step").write_text("1, attempt 1")
    assert lost.save("every 600 s") is True
    client.bucket("ckpt-bkt").delete_blob(PREFIX + "attempt-1/save-1/step")  # the bucket's lifecycle
    rerun = attempt(tmp_path, client, 2, max_bytes=8)
    rerun.restore(Progress(), threading.Event())  # gone: the job starts afresh
    assert list(rerun.directory.iterdir()) == []

    (lost.directory / "step").write_text("5, attempt 1")
    lost._quietly("every 600 s", threading.Event())  # the lost attempt's periodic save, after the rerun began
    (rerun.directory / "step").write_text("2, attempt 2 (over max_bytes)")
    with pytest.raises(TransferError, match="no checkpoint was saved: the next attempt starts afresh"):
        rerun.save("the attempt ended")

    third = attempt(tmp_path, client, 3)
    third.restore(Progress(), threading.Event())
    assert not (third.directory / "step").exists(), (third.directory / "step").read_text()  # as attempt 2 said
    assert manifest(client)["attempt"] == 3 and manifest(client)["files"] == [], manifest(client)
