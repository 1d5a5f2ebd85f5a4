"""An output stored by Cloud Storage whose answer the network lost: the client sends the request again. Cloud
Storage answers a resumable upload's last chunk sent again, once that upload finished, with the object it made
(as it answers any request about a finished upload); the stand-in (zen_dev.local.storage) answered 404, so a job
whose output is over the client's 8 MiB multipart limit was reported FAILED, exit code 0, with every byte of its
outputs stored."""

from __future__ import annotations

import sys

from tests.agent.test_agent_loop import start_message
from tests.agent.test_staging import BIG, client, objects, run_one  # noqa: F401 (fixture)

WRITES_BIG = f"import os, pathlib; pathlib.Path(os.environ['ZEN_OUTPUT_DIR'], 'model.bin').write_bytes(b'w' * {BIG})"


def test_a_large_output_whose_answer_was_lost_is_uploaded_and_the_job_succeeds(client, storage, tmp_path):  # noqa: F811
    storage.state.lose_answer("model.bin")

    reports = run_one(tmp_path, start_message("big-1", command=[sys.executable, "-c", WRITES_BIG],
                                              outputs="gs://out-bkt/res"))

    final = reports[-1]
    assert storage.state.answers_lost == 1  # stored, and its answer lost
    assert (final.status.value, final.exit_code) == ("SUCCEEDED", 0), final.message
    assert objects(client, "out-bkt") == {"res/big-1/attempt-1/model.bin": b"w" * BIG}
    assert final.uploaded_bytes == BIG and "zen: uploaded 1 file, " in final.message
