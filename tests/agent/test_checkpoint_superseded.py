"""An attempt Zen took for lost runs on until its fence stops it, while its rerun, elsewhere, saves the job's
checkpoint: the lost attempt's saves are refused from then on (``LATEST.json``'s generation precondition), and the
rerun's checkpoint stays the latest. What the lost attempt says of that (its final report, the job's output, ``zen
logs``) said "...; the previous one is kept", or "no checkpoint was saved: the next attempt starts afresh", where
the next attempt restores the rerun's save. The real AttemptRunner, a real job process, the official client against
the Cloud Storage stand-in."""

from __future__ import annotations

import json
import sys
import threading

import pytest
from google.cloud import storage as gcs

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import VM, make_agent, start_message
from tests.agent.test_checkpoint import lost_and_rerun, manifest
from tests.agent.test_checkpoint import client  # noqa: F401 - fixture
from tests.agent.test_checkpoint_end import URI, _confirm
from tests.agent.test_upload_end import finals, settings
from tests.waiting import wait_for
from zen.agent.checkpoint import Checkpoint
from zen.agent.staging import Progress, TransferError
from zen.core.checkpoints import StartCheckpoint

# Writes its state, says it is ready, waits for the test's go (the rerun has saved), writes its last state, exits 0.
JOB = ("import os, pathlib, time\n"
       "d = pathlib.Path(os.environ['ZEN_CHECKPOINT_DIR'])\n"
       "(d / 'model.pt').write_text('epoch 1, attempt 1')\n"
       "open(os.environ['READY'], 'w').close()\n"
       "deadline = time.monotonic() + 30\n"
       "while not os.path.exists(os.environ['GO']) and time.monotonic() < deadline:\n"
       "    time.sleep(0.05)\n"
       "(d / 'model.pt').write_text('epoch 2, attempt 1')\n")


def test_the_lost_attempts_report_does_not_say_a_checkpoint_is_kept_nor_that_the_next_starts_afresh(
        client, tmp_path):  # noqa: F811
    ready, go = tmp_path / "ready", tmp_path / "go"
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = _confirm("ck")
    transport.add_start(start_message("ck", command=[sys.executable, "-c", JOB], env={"READY": str(ready), "GO": str(go)},
                                      checkpoint=StartCheckpoint(uri=URI, every=600, max_bytes=10**6)))

    def rerun_saves() -> None:  # attempt 2, on another VM, once attempt 1's job runs
        wait_for(ready.exists, timeout_s=30)
        rerun = Checkpoint(StartCheckpoint(uri=URI, every=600, max_bytes=10**6), tmp_path / "rerun", 2, gcs.Client)
        rerun.prepare()
        rerun.restore(Progress(), threading.Event())
        (rerun.directory / "model.pt").write_text("epoch 9, attempt 2")
        assert rerun.save("every 600 s") is True
        go.touch()

    thread = threading.Thread(target=rerun_saves, daemon=True)
    thread.start()
    make_agent(transport, settings(tmp_path, stop_grace_s=0.5)).run()
    thread.join(10)

    final = finals(transport)["ck"]
    message = final.message or ""
    assert final.status.value == "SUCCEEDED", message
    assert "attempt 2 of the job saved its checkpoint since, which stays the latest" in message, message
    assert "the next attempt starts afresh" not in message and "kept" not in message, message
    rerun_save = manifest_of(client, "ck")  # what the next attempt restores
    assert rerun_save["attempt"] == 2 and rerun_save["generation"] == "attempt-2/save-1/", rerun_save


def manifest_of(client, job_id: str) -> dict:  # noqa: F811 - the fixture
    return json.loads(client.bucket("ckpt-bkt").blob(f"checkpoints/4xa100-40gb/{job_id}/LATEST.json").download_as_bytes())


@pytest.mark.parametrize("saved_before", [True, False])
def test_a_save_refused_for_a_later_attempts_says_that_one_stays_the_latest(client, tmp_path, saved_before):  # noqa: F811
    """The periodic save's note (the job's output, and the report's preface): the lost attempt's own save before, if
    any, is not kept (the rerun's replaced it), and the next attempt does not start afresh."""
    lost, lines = lost_and_rerun(tmp_path, client, saved_before)

    (lost.directory / "step").write_text("6")
    with pytest.raises(TransferError) as refused:
        lost.save("the attempt ended")
    assert str(refused.value) == ("checkpoint not saved (the attempt ended): attempt 2 of the job saved its checkpoint "
                                  "since, which stays the latest"), str(refused.value)
    lost._quietly("every 600 s", threading.Event())
    assert lines[-1] == ("zen: checkpoint not saved (every 600 s): attempt 2 of the job saved its checkpoint since, "
                         "which stays the latest"), lines
    assert manifest(client)["attempt"] == 2
