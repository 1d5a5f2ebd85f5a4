"""A checkpoint the job leaves unchanged for longer than its objects may be named again (``REUSE_WITHIN_S``, half the
least ``checkpoint_retention_days``): the bucket's lifecycle deletes objects by their age, whatever names them, so the
periodic save uploads it again while the VM still holds it. Nothing was saved (the folder had not changed): the
lifecycle then deleted the checkpoint and its LATEST.json, and a rerun started afresh although the job's checkpoint sat
whole on the VM the whole time. Against the storage stand-in, through the official client; time shortened."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

from tests.agent.test_checkpoint import attempt, client, names  # noqa: F401 (client: a fixture)
from zen.agent import checkpoint_objects
from zen.agent.staging import Progress


def test_an_unchanged_checkpoint_is_saved_again_before_the_lifecycle_deletes_it(tmp_path, client, monkeypatch):
    monkeypatch.setattr(checkpoint_objects, "REUSE_WITHIN_S", 0.5)  # 12 h; the lifecycle below: a day
    first = attempt(tmp_path, client, 1)
    (first.directory / "model.pt").write_text("epoch 1")
    assert first.save("every 600 s")
    time.sleep(0.6)  # the job writes nothing for half a day
    mark = datetime.now(timezone.utc)
    first.save("every 600 s")  # the periodic save
    time.sleep(0.5)  # the other half: the lifecycle deletes what is a day old
    for blob in client.list_blobs("ckpt-bkt"):
        if blob.time_created < mark:
            blob.delete()

    lines: list[str] = []
    rerun = attempt(tmp_path, client, 2, lines=lines)
    rerun.restore(Progress(), threading.Event())
    path = rerun.directory / "model.pt"
    assert path.exists() and path.read_text() == "epoch 1", (lines, names(client))
