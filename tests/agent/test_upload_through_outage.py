"""A Cloud Storage outage while the outputs of a job that exited 0 are uploaded. The client sends each request
again for 120 s (5xx, 429, 408, timeouts); an outage longer than that failed the upload, and the job was reported
FAILED with exit code 0: never retried (a retry is for a failed exit), its outputs deleted with its work directory,
its results lost for a passing outage. Now the file is sent again through the outage, within the upload's own
bounds. Real jobs, the Cloud Storage stand-in (its ``outage``), the official client with Zen's bound on its retries of a request cut to 1 s,
so that a few seconds of outage outlast them as minutes do in service."""

from __future__ import annotations

import sys

import pytest

from tests.agent.test_agent_loop import start_message
from tests.agent.test_staging import BIG, client, objects, run_one  # noqa: F401 (fixture)
from zen.agent import output_files
from zen.core.models import AgentStatus

WRITES = ("import os, pathlib, sys; o = pathlib.Path(os.environ['ZEN_OUTPUT_DIR']); "
          "o.joinpath('a-log.txt').write_text('log'); o.joinpath('result.txt').write_bytes(b'4' * int(sys.argv[1]))")


@pytest.fixture
def short_tries(monkeypatch):
    """The client's own retries of one request end after 1 s (120 s in service)."""
    monkeypatch.setattr(output_files, "CLIENT_RETRY_S", 1.0)


@pytest.mark.parametrize("size", [2, BIG])  # BIG: a resumable upload, begun again from its first byte
def test_an_outage_longer_than_the_clients_retries_delays_the_upload_and_the_job_succeeds(  # noqa: F811
        client, storage, short_tries, tmp_path, size):
    storage.state.outage("result.txt", seconds=5.0)

    reports = run_one(tmp_path, start_message("through", command=[sys.executable, "-c", WRITES, str(size)],
                                              outputs="gs://out-bkt/r"))

    final = reports[-1]
    assert (final.status.value, final.exit_code) == ("SUCCEEDED", 0), final.message
    assert objects(client, "out-bkt") == {"r/through/attempt-1/a-log.txt": b"log",
                                          "r/through/attempt-1/result.txt": b"4" * size}
    assert storage.state.refused >= 2 and final.uploaded_bytes == 3 + size  # a-log.txt, before the outage, sent once
    waits = [r.message for r in reports if r.status is AgentStatus.RUNNING and "Cloud Storage unavailable" in (r.message or "")]
    assert waits and waits[0].startswith("zen: uploading outputs: 1 file, 3 B in "), waits


def test_an_outage_past_the_uploads_budget_fails_the_job_saying_so(client, storage, short_tries, tmp_path):  # noqa: F811
    storage.state.outage("result.txt", seconds=60.0)

    reports = run_one(tmp_path, start_message("outlasted", command=[sys.executable, "-c", WRITES, "2"], max_runtime_s=4,
                                              outputs="gs://out-bkt/r"))

    final = reports[-1]
    assert (final.status.value, final.exit_code) == ("FAILED", 0)
    assert "zen: uploading outputs exceeded its budget, max_runtime_s=4 (1 file, 3 B in " in final.message
    assert "Cloud Storage unavailable for " in final.message and "(503 Service Unavailable)" in final.message
