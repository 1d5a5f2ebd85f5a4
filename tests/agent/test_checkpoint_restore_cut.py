"""A checkpoint restore cut (a STOP while the attempt stages, the VM's shutdown, the fence) while one of the
checkpoint's files downloads: the download stops with the next bytes that come, as an input's does. Before, a file
was downloaded whole first (``download_to_filename`` never looked at the cut), however large (a model's weights,
many GB): the STOPPED report waited the stop grace for it, then the download ran on behind the report, into the
attempt's removed directory on the VM's disk (unseen by the disk quota) while the next job ran there; and a cut
restore whose last file came whole still made the checkpoint its attempt's own, and said it was restored."""

from __future__ import annotations

import os
import threading

import pytest
from google.cloud import storage as gcs

from tests.agent.test_checkpoint import attempt, in_thread, manifest
from zen.agent.staging import Cancelled, Progress

SIZE = 4 * 2**20  # several of the client's reads


@pytest.fixture
def client(storage):
    client = gcs.Client()
    client.create_bucket("ckpt-bkt")
    return client


def test_a_restore_cut_while_a_file_downloads_stops_mid_file_and_takes_nothing_over(tmp_path, client, storage):
    first = attempt(tmp_path, client, 1, max_bytes=10 * SIZE)
    (first.directory / "weights.bin").write_bytes(os.urandom(SIZE))
    assert first.save("every 600 s") is True
    lines: list[str] = []
    rerun, progress, cut = attempt(tmp_path, client, 2, lines=lines), Progress(), threading.Event()
    held = storage.state.hold("/save-1/weights.bin", "read")  # asked for, its bytes not come yet
    thread, got = in_thread(rerun.restore, progress, cut)
    assert held.reached.wait(10)
    cut.set()  # a STOP came while the file downloads
    held.release.set()
    thread.join(10)

    assert not thread.is_alive()
    assert len(got) == 1 and isinstance(got[0], Cancelled), got
    assert (rerun.directory / "weights.bin").stat().st_size < SIZE  # stopped mid-file
    assert progress.bytes < SIZE and progress.files == 0
    assert manifest(client)["attempt"] == 1  # not taken over by the attempt cut
    assert not any(line.startswith("zen: checkpoint restored") for line in lines)


def test_a_restore_counts_a_file_as_it_comes_and_restores_it_whole(tmp_path, client):
    first = attempt(tmp_path, client, 1, max_bytes=10 * SIZE)
    weights = os.urandom(SIZE)
    (first.directory / "weights.bin").write_bytes(weights)
    (first.directory / "step").write_text("7")
    assert first.save("every 600 s") is True
    rerun, progress = attempt(tmp_path, client, 2), Progress()
    rerun.restore(progress, threading.Event())

    assert (rerun.directory / "weights.bin").read_bytes() == weights
    assert (rerun.directory / "step").read_text() == "7"
    assert (progress.files, progress.bytes) == (2, SIZE + 1)  # each byte counted once
    assert manifest(client)["attempt"] == 2
