"""Outputs the agent cannot list fail the upload, named, after the rest went up (a job that exited 0 FAILS): os.walk
ignores the folders it cannot read unless told, and a job SUCCEEDED with part of its outputs missing from the bucket,
its final report saying nothing about them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from google.cloud import storage as gcs

from zen.agent.staging import AttemptData, TransferError


@pytest.fixture
def client(storage):
    client = gcs.Client()
    client.create_bucket("out-bkt")
    return client


def objects(client) -> list[str]:
    return sorted(blob.name for blob in client.list_blobs("out-bkt"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two users")
def test_a_folder_the_jobs_user_made_0700_is_not_dropped_silently_by_an_agent_without_dac_override(client, tmp_path):
    """The agent as zen-agent without CAP_DAC_OVERRIDE (docs/reference/agent.md: without systemd the script
    starts it with runuser, without the hardening); the container writes as nobody, a folder 0700."""
    work = tmp_path / "work"
    work.mkdir()
    for path in (tmp_path, *tmp_path.parents):
        if path != Path("/"):
            os.chmod(path, os.stat(path).st_mode | 0o005)
    work.chmod(0o777)
    data = AttemptData("j1", 1, [], "gs://out-bkt/runs", work)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the agent's user
        code = 1
        try:
            os.setgid(65533)
            os.setuid(65533)
            data.prepare()
            os.write(ready_w, b"p")
            os.read(go_r, 1)  # the job ran
            try:
                data.upload()
                code = 3 if not data.skipped else 0  # said nothing
            except TransferError:
                code = 0
        finally:
            os._exit(code)
    os.read(ready_r, 1)  # its directories are made
    (data.output_dir / "top.txt").write_text("top")
    folder = data.output_dir / "ckpt"
    folder.mkdir()
    (folder / "model.pt").write_text("weights")
    os.chown(folder / "model.pt", 65534, 65534)
    os.chown(folder, 65534, 65534)
    folder.chmod(0o700)
    os.write(go_w, b"g")
    _, status = os.waitpid(pid, 0)
    assert objects(client) == ["runs/j1/attempt-1/top.txt"]
    assert os.waitstatus_to_exitcode(status) == 0, "ckpt/model.pt not uploaded, and neither skipped nor failed"
