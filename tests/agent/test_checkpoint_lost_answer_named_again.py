"""An earlier attempt's save whose manifest landed with its answer lost, while its rerun restored that save and saved
its own (naming the unchanged weights' object of the earlier save again, zen.agent.checkpoint_objects): the earlier
attempt looked at the latest manifest's generation only, found the rerun's, and deleted the objects it uploaded, one
of which the rerun's LATEST.json names: the next attempt could not restore the weights and started afresh. It now
keeps every object the latest manifest names."""

from __future__ import annotations

import threading

import pytest

from tests.agent.test_checkpoint import PREFIX, attempt, client, manifest, names  # noqa: F401 (fixture)
from zen.agent.staging import Progress, TransferError


def test_an_earlier_attempts_lost_answer_never_deletes_objects_the_reruns_checkpoint_names(tmp_path, client):  # noqa: F811
    lost = attempt(tmp_path, client, 1)
    lost.restore(Progress(), threading.Event())
    (lost.directory / "weights.bin").write_bytes(b"w" * 1000)
    (lost.directory / "step").write_text("1")
    real_write, rerun = lost._write, attempt(tmp_path, client, 2)

    def landed_answer_lost(manifest_, cancel):
        real_write(manifest_, cancel)  # LATEST.json written: attempt-1/save-1/
        rerun.restore(Progress(), threading.Event())  # the rerun takes it over ...
        (rerun.directory / "step").write_text("2")
        assert rerun.save("every 600 s") is True  # ... and saves, naming attempt-1/save-1/weights.bin again
        raise ConnectionError("the manifest's answer was lost")

    lost._write = landed_answer_lost
    with pytest.raises(TransferError):
        lost.save("every 600 s")
    third = attempt(tmp_path, client, 3)
    third.restore(Progress(), threading.Event())
    assert (third.directory / "weights.bin").exists(), "the rerun's checkpoint lost its weights: started afresh"
    latest = manifest(client)
    objects = {PREFIX + item["object"] for item in latest["files"]}
    assert objects <= set(names(client)), (sorted(objects - set(names(client))), latest)
