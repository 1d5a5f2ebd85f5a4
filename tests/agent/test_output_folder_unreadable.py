"""Outputs the agent cannot read fail the upload, named, after the rest went up (a job that exited 0 FAILS).
os.walk ignores the folders it cannot read unless told, and a job SUCCEEDED with part of its outputs missing from
the bucket, its final report saying nothing about them. A file it cannot open likewise: a job that writes its results
atomically (``tempfile.mkstemp``, mode 0600, then renamed into ZEN_OUTPUT_DIR) as nobody left files an agent
without CAP_DAC_OVERRIDE could not read; they were put with the links and special files "not uploaded (only regular
files are)", and the job SUCCEEDED with its results missing from the bucket."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest
from google.cloud import storage as gcs

from zen.agent.staging import AttemptData, TransferError

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two users")


@pytest.fixture
def client(storage):
    client = gcs.Client()
    client.create_bucket("out-bkt")
    return client


def objects(client) -> list[str]:
    return sorted(blob.name for blob in client.list_blobs("out-bkt"))


def upload_as_the_agents_user(tmp_path: Path, job_writes: Callable[[Path], None]) -> str:
    """The agent as zen-agent without CAP_DAC_OVERRIDE (docs/reference/agent.md: without systemd the script starts
    it with runuser, without the hardening) prepares an attempt, the job (root here, files as nobody) writes its
    outputs with ``job_writes``, and the agent uploads them: what the upload said."""
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
    job_writes(data.output_dir)
    os.write(go_w, b"g")
    said = b""
    while chunk := os.read(said_r, 4096):
        said += chunk
    os.waitpid(pid, 0)
    return said.decode()


def test_a_folder_the_jobs_user_made_0700_is_not_dropped_silently_by_an_agent_without_dac_override(client, tmp_path):
    def job_writes(outputs: Path) -> None:  # as nobody, a folder 0700
        (outputs / "top.txt").write_text("top")
        folder = outputs / "ckpt"
        folder.mkdir()
        (folder / "model.pt").write_text("weights")
        os.chown(folder / "model.pt", 65534, 65534)
        os.chown(folder, 65534, 65534)
        folder.chmod(0o700)

    said = upload_as_the_agents_user(tmp_path, job_writes)
    assert objects(client) == ["runs/j1/attempt-1/top.txt"]
    assert said.startswith("failed: ") and "ckpt" in said, said


def test_a_file_the_jobs_user_made_0600_fails_the_upload_and_is_named(client, tmp_path):
    def job_writes(outputs: Path) -> None:  # as nobody, a file 0600
        (outputs / "log.txt").write_text("log")
        model = outputs / "model.pt"
        model.write_text("weights")
        os.chown(model, 65534, 65534)
        model.chmod(0o600)

    said = upload_as_the_agents_user(tmp_path, job_writes)
    assert objects(client) == ["runs/j1/attempt-1/log.txt"]  # the rest went up
    assert said == "failed: could not read model.pt (Permission denied): not uploaded"
