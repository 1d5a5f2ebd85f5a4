"""The final report's zen lines (at most PREFACE_CHARS) keep the note whole and cut the summary after it: cut from
the front, the summary naming the links not uploaded, with a few long paths, pushed out the note, the only line
saying why a job that exited 0 FAILED (its upload failed)."""

from __future__ import annotations

import sys

import pytest
from google.cloud import storage as gcs

from tests.agent.test_agent_loop import start_message
from tests.agent.test_staging import run_one


@pytest.fixture
def client(storage):
    client = gcs.Client()
    client.create_bucket("out-bkt")
    return client


# A Hugging Face style cache in the outputs: snapshot files are links into blobs/ (not uploaded, named).
WRITES = ("import os; o = os.environ['ZEN_OUTPUT_DIR']; open(os.path.join(o, 'metrics.json'), 'w').write('{}')\n"
          "snap = os.path.join(o, 'hf', 'models--some-org--some-rather-long-model-name-7b-instruct-v0.3-gptq-4bit', 'snapshots', "
          "'0123456789abcdef0123456789abcdef01234567'); os.makedirs(snap)\n"
          "for i in range(6):\n"
          "    os.symlink('../../blobs/' + 'f' * 64, os.path.join(snap, f'model-0000{i}-of-00006.safetensors'))\n")


def test_a_failed_upload_is_still_said_when_links_were_skipped(client, tmp_path):
    reports = run_one(tmp_path, start_message("links-1", command=[sys.executable, "-c", WRITES],
                                              outputs="gs://gone-bkt/runs"))

    final = reports[-1]
    assert final.status.value == "FAILED" and final.exit_code == 0
    assert "not uploaded (only regular files are)" in final.message
    assert "upload of metrics.json to gs://gone-bkt/runs/links-1/attempt-1/metrics.json failed" in final.message, \
        final.message
