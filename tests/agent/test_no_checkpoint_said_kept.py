"""A job's first attempt, no checkpoint saved yet (its restore said "no checkpoint saved yet: the job starts
afresh"), whose last save is cut (here by its budget, max_runtime_s; a STOP's deadline or the VM's shutdown alike):
the final report said "...; the previous checkpoint is kept" although there was none, and the rerun started from
scratch. It says so now."""

from __future__ import annotations

import sys

from google.cloud import storage as gcs  # noqa: F401 - the bucket fixture's client

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import VM, make_agent, start_message
from tests.agent.test_checkpoint_end import PREFIX, URI, _confirm, bucket  # noqa: F401 - the fixture
from tests.agent.test_upload_end import finals, settings
from zen.core.checkpoints import StartCheckpoint


def test_a_cut_first_save_does_not_claim_a_previous_checkpoint_is_kept(bucket, storage, tmp_path):  # noqa: F811
    held = storage.state.hold("/save-1/model.pt", "store")  # the last (and first) save: a slow link
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = _confirm("ck")
    job = "import os, pathlib; pathlib.Path(os.environ['ZEN_CHECKPOINT_DIR'], 'model.pt').write_text('epoch 9')\n"
    transport.add_start(start_message("ck", command=[sys.executable, "-c", job], max_runtime_s=2,
                                      checkpoint=StartCheckpoint(uri=URI, every=600, max_bytes=10**6)))
    try:
        make_agent(transport, settings(tmp_path, stop_grace_s=0.5)).run()
    finally:
        held.release.set()
    final = finals(transport)["ck"]
    assert bucket.get_blob(PREFIX + "LATEST.json") is None  # no checkpoint exists: the rerun starts afresh
    assert "saving the checkpoint exceeded its budget" in final.message, final.message
    assert "the previous checkpoint is kept" not in final.message, final.message
    assert "no checkpoint was saved: the next attempt starts afresh" in final.message, final.message
