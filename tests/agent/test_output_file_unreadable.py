"""An output file the agent cannot open fails the upload, named, after the rest went up, as a folder it cannot list
does (test_output_folder_unreadable.py): a job that writes its results atomically (``tempfile.mkstemp``, mode
0600, then renamed into ZEN_OUTPUT_DIR) as nobody left files an agent without CAP_DAC_OVERRIDE could not read; they
were put with the links and special files "not uploaded (only regular files are)", and the job SUCCEEDED with its
results missing from the bucket."""

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
def test_a_file_the_jobs_user_made_0600_fails_the_upload_and_is_named(client, tmp_path):
    """The agent as zen-agent without CAP_DAC_OVERRIDE (docs/reference/agent.md: without systemd the script
    starts it with runuser, without the hardening); the container writes as nobody, a file 0600."""
    work = tmp_path / "work"
    work.mkdir()
    for path in (tmp_path, *tmp_path.parents):
        if path != Path("/"):
            os.chmod(path, os.stat(path).st_mode | 0o005)
    work.chmod(0o777)
    data = AttemptData("j1", 1, [], "gs://out-bkt/runs", work)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    said_r, said_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the agent's user
        try:
            os.setgid(65533)
            os.setuid(65533)
            data.prepare()
            os.write(ready_w, b"p")
            os.read(go_r, 1)  # the job ran
            try:
                data.upload()
                said = f"uploaded without an error; {data.summary()}"
            except TransferError as exc:
                said = f"failed: {exc}"
            os.write(said_w, said.encode())
        finally:
            os._exit(0)
    os.close(said_w)
    os.read(ready_r, 1)  # its directories are made
    (data.output_dir / "log.txt").write_text("log")
    model = data.output_dir / "model.pt"
    model.write_text("weights")
    os.chown(model, 65534, 65534)
    model.chmod(0o600)
    os.write(go_w, b"g")
    said = b""
    while chunk := os.read(said_r, 4096):
        said += chunk
    os.waitpid(pid, 0)
    assert objects(client) == ["runs/j1/attempt-1/log.txt"]  # the rest went up
    assert said.decode() == "failed: could not read model.pt (Permission denied): not uploaded"
