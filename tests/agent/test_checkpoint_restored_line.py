"""The line a restore gives the job's output counts its files as a save's line does: one file was "1 files"
(`zen: checkpoint restored: 1 files, 2 B saved by attempt 1`, beside the save's `1 file, 2 B`)."""

from __future__ import annotations

import pytest

from zen.agent.checkpoint_restore import restored


@pytest.mark.parametrize("sizes, counted", [([2], "1 file, 2 B"), ([2, 3], "2 files, 5 B"), ([], "0 files, 0 B")])
def test_a_restores_line_counts_its_files_as_a_saves_does(sizes, counted):
    manifest = {"files": [{"size": size} for size in sizes], "saved_by": 1, "reason": "the attempt ended"}
    assert restored(manifest) == f"zen: checkpoint restored: {counted} saved by attempt 1 (the attempt ended)"
