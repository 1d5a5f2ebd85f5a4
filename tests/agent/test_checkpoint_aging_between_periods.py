"""A checkpoint whose objects turn ``REUSE_WITHIN_S`` old between two periodic saves (``every`` may be up to 7 days,
``checkpoint_retention_days`` as little as 1). The periodic save uploaded an aging object again only when ``every``
came round: a rerun that restored a checkpoint 13 hours old (a long wait in the queue) with ``every: 21600`` under a
1-day retention left it to the lifecycle for hours, and a VM gone then without a word left the next attempt nothing
("checkpoint file ... is gone: the job starts afresh") although the checkpoint sat whole on the VM. The periodic save
now comes when an object turns that old, whatever ``every``. Against the storage stand-in, through the official client."""

from __future__ import annotations

import json
import threading
import time

from tests.agent.test_checkpoint import PREFIX, attempt, client, manifest  # noqa: F401 (client: a fixture)
from tests.waiting import wait_for
from zen.agent import checkpoint_objects
from zen.agent.checkpoint import MANIFEST
from zen.agent.staging import Progress


def test_a_restored_checkpoint_near_the_lifecycles_age_is_uploaded_again_before_the_next_period(tmp_path, client):
    bucket = client.bucket("ckpt-bkt")
    bucket.blob(PREFIX + "attempt-1/save-1/model.pt").upload_from_string(b"epoch 9")
    written = time.time() - 13 * 3600  # saved by attempt 1, then 13 hours in the queue
    bucket.blob(PREFIX + MANIFEST).upload_from_string(json.dumps({
        "generation": "attempt-1/save-1/", "attempt": 1, "reason": "the attempt ended", "saved_at": written,
        "files": [{"path": "model.pt", "size": 7, "object": "attempt-1/save-1/model.pt", "at": written}],
        "folders": []}))
    rerun = attempt(tmp_path, client, 2, every=21600)
    rerun.restore(Progress(), threading.Event())
    assert (rerun.directory / "model.pt").read_text() == "epoch 9"

    rerun.start_periodic()
    try:
        wait_for(lambda: rerun.saves == 1, what="a save of the aging checkpoint", timeout_s=5)
    finally:
        rerun.stop_periodic()
    [item] = manifest(client)["files"]
    assert item["object"] == "attempt-2/save-1/model.pt" and item["at"] > written + 12 * 3600
    assert bucket.blob(PREFIX + item["object"]).download_as_bytes() == b"epoch 9"


def test_an_unchanged_checkpoint_is_uploaded_again_as_it_ages_though_every_is_longer(tmp_path, client, monkeypatch):
    monkeypatch.setattr(checkpoint_objects, "REUSE_WITHIN_S", 0.5)  # 12 h; every below: a week
    first = attempt(tmp_path, client, 1, every=604800)
    (first.directory / "model.pt").write_text("epoch 1")
    assert first.save("every 604800 s")
    first.start_periodic()
    try:
        wait_for(lambda: first.saves == 2, what="a save of the aging checkpoint", timeout_s=5)
    finally:
        first.stop_periodic()
    assert manifest(client)["generation"] == "attempt-1/save-2/"
    assert [item["object"] for item in manifest(client)["files"]] == ["attempt-1/save-2/model.pt"]


def test_an_aging_save_that_failed_is_tried_again_within_the_hour_not_a_week_later():
    """An object still past the age limit after a save (it failed): waiting ``every`` (a week), the bucket's
    lifecycle deleted objects the manifest still named."""
    now = time.time()
    held = {"model.pt": ("attempt-1/save-1/model.pt", now - 13 * 3600, (7, 0, 1))}
    assert checkpoint_objects.next_save_in(held, 604800, now, tried=True) <= 3600
    assert checkpoint_objects.next_save_in(held, 600, now, tried=True) == 600  # every, sooner
    assert checkpoint_objects.next_save_in(held, 604800, now, tried=False) == checkpoint_objects.AGING_SLACK_S
