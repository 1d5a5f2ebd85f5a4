"""An attempt Zen took for lost runs on until its fence stops it (a VM cut off from Pub/Sub), while its rerun runs
elsewhere. Two corners of what the checkpoint's manifest (``LATEST.json``) then holds and what each attempt says:

A rerun that found no checkpoint wrote no manifest, so the lost attempt's save, landing after the rerun started,
became the latest: the rerun's own save failing (here above ``max_bytes``) said "no checkpoint was saved: the next
attempt starts afresh", and the next attempt restored the superseded attempt's files. The rerun now writes a manifest
naming no save (``checkpoint_objects.claim``), and the lost attempt's saves are refused from then on.

A lost attempt's save failing for another reason than that refusal (too large, a file changed, an upload failed)
said "the previous one is kept" (or "starts afresh") while a later attempt's save was the latest. The official
client against the Cloud Storage stand-in (``ifGenerationMatch`` answered 412 as Cloud Storage does)."""

from __future__ import annotations

import threading

import pytest

from tests.agent.test_checkpoint import attempt, lost_and_rerun, manifest
from tests.agent.test_checkpoint import client  # noqa: F401 - fixture
from zen.agent.staging import Progress, TransferError


def test_a_lost_attempts_save_after_its_rerun_found_no_checkpoint_never_becomes_the_latest(tmp_path, client):  # noqa: F811
    lost = attempt(tmp_path, client, 1)
    lost.restore(Progress(), threading.Event())  # none yet
    lines: list[str] = []
    rerun = attempt(tmp_path, client, 2, max_bytes=8, lines=lines)
    rerun.restore(Progress(), threading.Event())  # none yet: the job starts afresh
    assert lines == ["zen: no checkpoint saved yet: the job starts afresh"]

    (lost.directory / "step").write_text("5, attempt 1")
    lost._quietly("every 600 s", threading.Event())  # a periodic save of the lost attempt's, after the rerun began

    (rerun.directory / "step").write_text("2, attempt 2 (over max_bytes)")
    with pytest.raises(TransferError, match="no checkpoint was saved: the next attempt starts afresh"):
        rerun.save("the attempt ended")
    third_lines: list[str] = []
    third = attempt(tmp_path, client, 3, lines=third_lines)
    third.restore(Progress(), threading.Event())
    assert not (third.directory / "step").exists(), (third.directory / "step").read_text()  # as attempt 2 said
    assert third_lines == ["zen: no checkpoint saved yet: the job starts afresh"]
    assert lost.notes == ["checkpoint not saved (every 600 s): attempt 2 of the job has started since, finding no "
                          "checkpoint, whose saves alone are restored from now on"], lost.notes

    (third.directory / "step").write_text("3, attempt 3")
    assert third.save("every 600 s") is True
    assert manifest(client)["attempt"] == 3
    fourth = attempt(tmp_path, client, 4)
    fourth.restore(Progress(), threading.Event())
    assert (fourth.directory / "step").read_text() == "3, attempt 3"


@pytest.mark.parametrize("saved_before", [True, False])
def test_a_lost_attempts_save_failing_otherwise_says_the_later_attempts_stays_the_latest(tmp_path, client, saved_before):  # noqa: F811
    lost, lines = lost_and_rerun(tmp_path, client, saved_before, max_bytes=8)

    (lost.directory / "step").write_text("6, above max_bytes")  # refused before any write: not for the rerun's
    with pytest.raises(TransferError) as failed:
        lost.save("the attempt ended")
    assert str(failed.value) == (
        "checkpoint not saved (the attempt ended): ZEN_CHECKPOINT_DIR holds 18 B, above the limit of 8 B; attempt 2 "
        "of the job saved its checkpoint since, which stays the latest"), str(failed.value)
    lost._quietly("every 600 s", threading.Event())
    assert lines[-1].endswith("; attempt 2 of the job saved its checkpoint since, which stays the latest"), lines


def test_a_save_failing_after_a_rerun_restored_this_attempts_checkpoint_says_it_is_kept(tmp_path, client):  # noqa: F811
    """The rerun took the lost attempt's save over without saving: that save is the latest, "kept" is true."""
    lost = attempt(tmp_path, client, 1, max_bytes=8)
    (lost.directory / "step").write_text("5")
    assert lost.save("every 600 s") is True
    rerun = attempt(tmp_path, client, 2)
    rerun.restore(Progress(), threading.Event())
    (lost.directory / "step").write_text("6, above max_bytes")
    with pytest.raises(TransferError, match="; the previous one is kept$"):
        lost.save("the attempt ended")
    (lost.directory / "step").write_text("6")
    with pytest.raises(TransferError, match=r": attempt 2 of the job restored this attempt's checkpoint since, which "
                                            r"stays the latest$"):
        lost.save("the attempt ended")
