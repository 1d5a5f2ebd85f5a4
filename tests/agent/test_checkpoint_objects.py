"""Which object holds each file of a checkpoint's save (zen.agent.checkpoint_objects): a file named again only while
unchanged and its object young enough that the bucket's lifecycle (checkpoint_retention_days, at least 1) cannot have
deleted it; a manifest from before objects were named reads as it did; a name no save writes is refused."""

from __future__ import annotations

import pytest

from zen.agent.checkpoint_objects import REUSE_WITHIN_S, held_by, items, object_of, reusable

NOW = 1_700_000_000.0


def test_a_file_is_named_again_while_unchanged_and_young_enough():
    held = {"w.bin": ("attempt-1/save-1/w.bin", NOW - 60, (80, 5, 7)), "old.bin": ("attempt-1/save-1/old.bin",
            NOW - REUSE_WITHIN_S - 1, (3, 5, 8)), "step": ("attempt-1/save-1/step", NOW - 60, (6, 5, 9))}
    files = {"w.bin": (80, 5, 7), "old.bin": (3, 5, 8), "step": (21, 6, 10)}  # step rewritten (a new inode)
    kept = reusable(held, files, NOW)
    assert kept == {"w.bin": ("attempt-1/save-1/w.bin", NOW - 60)}  # old.bin: its object nears the lifecycle's age
    entries = items(files, kept, "attempt-1/save-2/", NOW)
    assert [(e["path"], e["object"], e["at"]) for e in entries] == [
        ("old.bin", "attempt-1/save-2/old.bin", NOW), ("step", "attempt-1/save-2/step", NOW),
        ("w.bin", "attempt-1/save-1/w.bin", NOW - 60)]
    assert held_by({"files": entries}, files)["w.bin"] == ("attempt-1/save-1/w.bin", NOW - 60, (80, 5, 7))


def test_a_manifest_from_before_reads_as_it_did_and_a_foreign_object_is_refused():
    older = {"generation": "attempt-1/save-3/", "saved_at": NOW, "files": [{"path": "a/b", "size": 1}]}
    assert object_of(older, older["files"][0]) == "attempt-1/save-3/a/b"
    assert held_by(older, {"a/b": (1, 2, 3)}) == {"a/b": ("attempt-1/save-3/a/b", NOW, (1, 2, 3))}
    for bad in ("../other-job/attempt-1/x", "attempt-1/../../x", 7):
        with pytest.raises(ValueError):
            object_of(older, {"path": "a/b", "size": 1, "object": bad})
