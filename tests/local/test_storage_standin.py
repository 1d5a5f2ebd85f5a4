"""The Cloud Storage stand-in (zen_dev.local.storage) through the official client: a download pinned to a
generation (the ``mediaLink`` of a listed or fetched object carries it) answers 404 once that
generation is no longer live, as Cloud Storage does; it served the live content instead, so a test
could never see what the agent does when an input changes while it is staged."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from google.api_core import exceptions as gexc
from google.cloud import storage as gcs

from zen_dev.local.storage import StorageStandIn


@pytest.fixture
def bucket(monkeypatch):
    with StorageStandIn() as standin:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", standin.address)
        client = gcs.Client()
        client.create_bucket("data-bkt")
        yield client.bucket("data-bkt")


def test_a_download_of_a_generation_no_longer_live_is_not_found(bucket):
    bucket.blob("x").upload_from_string(b"OLD!")
    old = bucket.get_blob("x")
    bucket.blob("x").upload_from_string(b"NEW!")
    new = bucket.get_blob("x")

    assert new.generation != old.generation
    with pytest.raises(gexc.NotFound) as raised:
        old.download_as_bytes()
    assert f"data-bkt/x#{old.generation}" in str(raised.value)
    assert new.download_as_bytes() == b"NEW!"
    assert bucket.blob("x").download_as_bytes() == b"NEW!"  # no generation named: the live one


def test_a_deleted_object_is_not_found_by_generation_and_a_stale_generation_cannot_be_deleted(bucket):
    bucket.blob("y").upload_from_string(b"one")
    first = bucket.get_blob("y")
    bucket.blob("y").upload_from_string(b"two")

    with pytest.raises(gexc.NotFound):
        bucket.blob("y", generation=first.generation).delete()
    assert bucket.get_blob("y").download_as_bytes() == b"two"  # the live one stays
    assert bucket.get_blob("y", generation=first.generation) is None  # metadata too: 404
    bucket.get_blob("y").delete()
    with pytest.raises(gexc.NotFound):
        first.download_as_bytes()


def test_the_bytes_of_a_resumable_upload_go_with_its_object(bucket):
    """A finished resumable upload is remembered, to answer its last chunk sent again (its answer lost) with the
    object it made; it kept the object's bytes, over 8 MiB each (the client's multipart limit): a stack that
    uploaded and deleted checkpoints held 64 of them."""
    big = 9 * 1024 * 1024

    def upload_and_delete(n: int) -> None:
        blob = bucket.blob(f"ckpt/{n}")
        blob.upload_from_string(bytes([n]) * big)  # resumable: over the multipart limit
        blob.delete()

    upload_and_delete(0)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(1, 5):
            upload_and_delete(n)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < big, f"{kept / 2**20:.0f} MiB kept after 4 uploads of 9 MiB, each deleted"
