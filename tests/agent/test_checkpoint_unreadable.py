"""A checkpoint the agent cannot read is not saved, and the job's output says why. The job runs as nobody, the agent as
zen-agent without CAP_DAC_OVERRIDE: a folder the job made 0700 (``tempfile.mkdtemp``, then renamed into place: a
checkpoint written whole) was skipped without a word as the directory was listed. The save landed without it, said
"checkpoint saved", and deleted the objects of the save before: the rerun restored the job's step counter without its
weights. Against the storage stand-in, through the official client."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Callable

import pytest
from google.cloud import storage as gcs

from tests.agent.test_checkpoint import MANIFEST, PREFIX, URI, client  # noqa: F401 (client: a fixture)
from zen.agent.checkpoint import Checkpoint
from zen.agent.staging import Progress, TransferError
from zen.core.checkpoints import StartCheckpoint

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two users")


def saves_as_the_agents_user(tmp_path: Path, job_writes: Callable[[Path], None]) -> list[str]:
    """The agent (uid 65533, no CAP_DAC_OVERRIDE) restores the job's checkpoint and saves it twice, once after each of
    ``job_writes``' two calls (the job, root here, its files as nobody): what each save said."""
    for path in (tmp_path, *tmp_path.parents):
        if path != Path("/"):
            os.chmod(path, os.stat(path).st_mode | 0o005)
    work = tmp_path / "work"
    work.mkdir(mode=0o777)
    work.chmod(0o777)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    said_r, said_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the agent's user
        try:
            os.setgid(65533)
            os.setuid(65533)
            checkpoint = Checkpoint(StartCheckpoint(uri=URI, every=600, max_bytes=10**6), work, 1, gcs.Client)
            checkpoint.prepare()
            checkpoint.restore(Progress(), threading.Event())
            said = []
            for _ in range(2):
                os.write(ready_w, b"r")
                os.read(go_r, 1)  # the job wrote
                try:
                    said.append(f"saved: {checkpoint.save('every 600 s')}")
                except TransferError as exc:
                    said.append(f"failed: {exc}")
            os.write(said_w, json.dumps(said).encode())
        finally:
            os._exit(0)
    os.close(said_w)
    for _ in range(2):
        os.read(ready_r, 1)
        job_writes(work / "checkpoint")
        os.write(go_w, b"g")
    said = b""
    while chunk := os.read(said_r, 4096):
        said += chunk
    os.waitpid(pid, 0)
    return json.loads(said)


def as_nobody(path: Path, mode: int) -> None:
    os.chown(path, 65534, 65534)
    path.chmod(mode)


@pytest.mark.parametrize("mode", [0o700, 0o744])  # 0744: listed, but its files' sizes and times cannot be read
def test_a_folder_the_job_made_0700_fails_the_save_named_and_the_save_before_stays(client, tmp_path, mode):  # noqa: F811
    step = [0]

    def job_writes(folder: Path) -> None:  # a step counter, and the weights in a folder written whole, then renamed
        step[0] += 1
        (folder / "step.txt").write_text(str(step[0] * 100))
        as_nobody(folder / "step.txt", 0o644)
        made = folder / f"tmp-{step[0]}"
        made.mkdir()
        (made / "model.pt").write_text(f"weights of step {step[0] * 100}")
        as_nobody(made / "model.pt", 0o644)
        as_nobody(made, 0o755 if step[0] == 1 else mode)  # tempfile.mkdtemp's mode, the second time
        if (folder / "weights").exists():
            (folder / "weights" / "model.pt").unlink()
            (folder / "weights").rmdir()
        made.rename(folder / "weights")

    said = saves_as_the_agents_user(tmp_path, job_writes)
    assert said[0] == "saved: True", said
    unread = "folder weights cannot be read" if mode == 0o700 else "file weights/model.pt cannot be read"
    assert said[1].startswith("failed: checkpoint not saved (every 600 s): ") and unread in said[1], said
    assert said[1].endswith("; the previous one is kept"), said
    latest = json.loads(client.bucket("ckpt-bkt").blob(PREFIX + MANIFEST).download_as_bytes())
    assert sorted(item["path"] for item in latest["files"]) == ["step.txt", "weights/model.pt"], latest
    rerun = Checkpoint(StartCheckpoint(uri=URI, every=600, max_bytes=10**6), tmp_path / "rerun", 2, lambda: client)
    rerun.prepare()
    rerun.restore(Progress(), threading.Event())
    assert (rerun.directory / "step.txt").read_text() == "100"
    assert (rerun.directory / "weights" / "model.pt").read_text() == "weights of step 100"


def test_a_file_the_job_made_0600_fails_the_save_named(client, tmp_path):  # noqa: F811
    step = [0]

    def job_writes(folder: Path) -> None:  # tempfile.mkstemp's mode, the second time
        step[0] += 1
        (folder / "model.pt").write_text(f"weights of step {step[0] * 100}")
        as_nobody(folder / "model.pt", 0o644 if step[0] == 1 else 0o600)

    said = saves_as_the_agents_user(tmp_path, job_writes)
    assert said[0] == "saved: True", said
    assert said[1].startswith("failed: checkpoint not saved (every 600 s): ") and "model.pt" in said[1], said
    assert "Permission denied" in said[1] and said[1].endswith("; the previous one is kept"), said
    latest = json.loads(client.bucket("ckpt-bkt").blob(PREFIX + MANIFEST).download_as_bytes())
    assert latest["generation"] == "attempt-1/save-1/", latest
