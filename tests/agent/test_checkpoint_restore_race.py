"""A checkpoint restore that meets another attempt's save landing between reading LATEST.json's metadata and its
bytes: the bytes are asked for by generation (the client's mediaLink), and that generation is gone (a 404, no
versioning). Such an error of Cloud Storage's is ``Unavailable`` (PREEMPTED: requeued), not ``TransferError``:
the attempt ended FAILED with no exit code, which Zen never retries."""

from __future__ import annotations

import json
import threading
import time

from google.cloud import storage as gcs

from tests.agent.test_agent_loop import make_agent
from tests.agent.test_checkpoint_link import PREFIX, rerun_reading_step
from tests.agent.test_upload_end import finals, settings
from zen.core.models import AgentStatus


def _manifest(save: str, step: bytes) -> str:
    return json.dumps({"generation": f"attempt-1/save-{save}/", "attempt": 1, "reason": "every 600 s",
                       "saved_at": time.time(), "files": [{"path": "step", "size": len(step)}], "folders": []})


def test_a_save_landing_while_the_manifest_is_read_does_not_fail_the_rerun_for_good(storage, tmp_path):
    bucket = gcs.Client().create_bucket("ckpt-bkt")
    bucket.blob(PREFIX + "attempt-1/save-1/step").upload_from_string(b"step 1")
    bucket.blob(PREFIX + "LATEST.json").upload_from_string(_manifest("1", b"step 1"))
    held = storage.state.hold("LATEST.json", "read")

    def lands() -> None:  # attempt 1's last save (its VM still up until its fence) lands meanwhile
        held.reached.wait(60)
        storage.state.put("ckpt-bkt", PREFIX + "attempt-1/save-2/step", b"step 2")
        storage.state.put("ckpt-bkt", PREFIX + "LATEST.json", _manifest("2", b"step 2").encode())
        held.release.set()

    threading.Thread(target=lands, daemon=True).start()
    transport = rerun_reading_step()
    make_agent(transport, settings(tmp_path)).run()
    final = finals(transport)["big"]
    assert held.reached.is_set()
    # the VM's or the service's (requeued), or restored again: never FAILED for good
    assert final.status is not AgentStatus.FAILED, (final.status, final.exit_code, final.message)
