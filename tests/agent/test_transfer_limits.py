"""max_runtime_s bounds the whole attempt on the VM, so no job runs unbounded (docs/reference/messages.md): staging
counts against it (a stage longer than it ends the attempt FAILED before the job runs; the job gets what
is left), and the upload of its outputs has a budget of its own, as long again. Only the job's run was
bounded (RunningJob's clock starts when it starts): a stalled download or upload held the VM for ever."""

from __future__ import annotations

import sys
import time

from google.cloud.storage import Blob

from tests.agent.test_agent_loop import start_message
from tests.agent.test_staging import client, objects, run_one  # noqa: F401 (fixture)
from zen.agent.staging import AttemptData
from zen.core.models import InputSpec

WORDS = [InputSpec(uri="gs://data-bkt/corpus/words.txt")]


def slow_fetch(seconds: float):
    fetch = AttemptData._fetch

    def fetching(self, blob, target):
        time.sleep(seconds)  # a stalled download: it does not look at the cancel
        return fetch(self, blob, target)

    return fetching


def test_a_stage_longer_than_max_runtime_s_fails_before_the_job_runs(client, tmp_path, monkeypatch):  # noqa: F811
    marker = tmp_path / "ran"
    monkeypatch.setattr(AttemptData, "_fetch", slow_fetch(3.0))
    began = time.monotonic()

    reports = run_one(tmp_path, start_message("slow-in", max_runtime_s=1, inputs=WORDS,
                                              command=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"]))

    final = reports[-1]
    assert final.status.value == "FAILED" and final.exit_code is None
    assert final.message.startswith("zen: staging exceeded max_runtime_s=1 (0 files, 0 B in ")
    assert time.monotonic() - began < 3.0  # cut at the limit (and SHUTDOWN_JOIN_S), not when the fetch ended
    assert not marker.exists()


def test_staging_counts_against_the_jobs_max_runtime_s(client, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(AttemptData, "_fetch", slow_fetch(1.5))

    reports = run_one(tmp_path, start_message("slow-both", max_runtime_s=3, inputs=WORDS,
                                              command=[sys.executable, "-c", "import time; time.sleep(2.5)"]))

    final = reports[-1]  # 2.5 s alone fits in 3 s; after 1.5 s of staging it does not
    assert final.status.value == "FAILED" and final.exit_code != 0
    assert final.message.startswith("zen: killed after exceeding max_runtime_s=3 (staging its inputs took 1.")


def test_a_checkpoints_restore_counts_against_the_jobs_max_runtime_s(client, tmp_path, monkeypatch):  # noqa: F811
    """A job with a checkpoint and no inputs got a whole max_runtime_s after its restore: a 1.5 s restore and
    a 2.5 s run SUCCEEDED under max_runtime_s 3 (its inputs' staging was counted, not its restore)."""
    from google.cloud import storage as gcs

    from zen.agent.checkpoint import Checkpoint
    from zen.core.checkpoints import StartCheckpoint

    gcs.Client().create_bucket("ckpt-bkt")
    restore = Checkpoint.restore
    monkeypatch.setattr(Checkpoint, "restore", lambda self, *a, **kw: (time.sleep(1.5), restore(self, *a, **kw))[1])

    reports = run_one(tmp_path, start_message("slow-restore", max_runtime_s=3, command=[
        sys.executable, "-c", "import time; time.sleep(2.5)"], checkpoint=StartCheckpoint(
        uri="gs://ckpt-bkt/checkpoints/c/slow-restore/", every=600, max_bytes=10**6)))

    final = reports[-1]
    assert final.status.value == "FAILED" and final.exit_code != 0
    assert final.message.startswith("zen: killed after exceeding max_runtime_s=3 (staging its checkpoint took 1.")


def test_an_upload_longer_than_its_budget_fails_a_job_that_exited_0(client, tmp_path, monkeypatch):  # noqa: F811
    upload = Blob.upload_from_file

    def stalled(self, *args, **kwargs):
        time.sleep(3.0)
        return upload(self, *args, **kwargs)

    monkeypatch.setattr(Blob, "upload_from_file", stalled)
    monkeypatch.setattr(Blob, "upload_from_filename", lambda self, *a, **kw: (time.sleep(3.0), None)[1])
    writes = "import os, pathlib; pathlib.Path(os.environ['ZEN_OUTPUT_DIR'], 'r.txt').write_text('r')"
    began = time.monotonic()

    reports = run_one(tmp_path, start_message("slow-out", max_runtime_s=1, outputs="gs://out-bkt/r",
                                              command=[sys.executable, "-c", writes]))

    final = reports[-1]
    assert final.status.value == "FAILED" and final.exit_code == 0
    assert "zen: uploading outputs exceeded its budget, max_runtime_s=1 (0 files, 0 B in " in final.message
    assert time.monotonic() - began < 3.0


def test_a_quick_stage_and_upload_leave_a_quick_job_alone(client, tmp_path):  # noqa: F811
    copies = ("import os, pathlib; i, o = os.environ['ZEN_INPUT_DIR'], os.environ['ZEN_OUTPUT_DIR']; "
              "pathlib.Path(o, 'w.txt').write_text(pathlib.Path(i, 'words.txt').read_text())")
    reports = run_one(tmp_path, start_message("quick", max_runtime_s=5, inputs=WORDS, outputs="gs://out-bkt/r",
                                              command=[sys.executable, "-c", copies]))

    assert reports[-1].status.value == "SUCCEEDED"
    assert objects(client, "out-bkt") == {"r/quick/attempt-1/w.txt": b"alpha beta\n"}
