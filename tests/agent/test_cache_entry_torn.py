"""A warm cache entry an earlier agent kept (zen.agent.cache) is checked against its object's checksum at its first
hit. The cache's directory outlives the agent, and an entry is written, then renamed into place, without waiting for
its bytes to reach the disk: a VM reset soon after (the boot disk kept) can leave it empty or torn. The size recorded
for such an entry was the size found on the disk, so the size check let it through, and the next job on that object
ran on an empty or torn input, SUCCEEDED, its results wrong without a word."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

from tests.agent.test_cache import stage
from tests.agent.test_staging import COPY_UPPER
from tests.agent.test_staging_integration import buckets  # noqa: F401  (fixture: data-bkt with corpus/words.txt)
from zen.agent.cache import InputCache, object_key


def the_entry(cache_dir: Path) -> Path:
    [entry] = [path for path in cache_dir.iterdir() if path.is_file()]
    return entry


def test_an_entry_left_empty_by_a_vm_reset_is_downloaded_again_by_the_restarted_agent(scheduler, agents, storage,
                                                                                       buckets, tmp_path):
    work = tmp_path / "work"
    agent = agents.start("vm-a", STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(work))
    scheduler.submit("torn-1", [sys.executable, "-c", COPY_UPPER], inputs=[{"uri": "gs://data-bkt/corpus/words.txt"}],
                     outputs="gs://out-bkt/runs")
    scheduler.wait_status("torn-1", "SUCCEEDED")
    assert agent.terminate() == 0
    the_entry(work / ".cache" / "vm-a").write_bytes(b"")  # renamed into place, its bytes never written

    agents.start("vm-a", STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(work))
    scheduler.submit("torn-2", [sys.executable, "-c", COPY_UPPER], inputs=[{"uri": "gs://data-bkt/corpus/words.txt"}],
                     outputs="gs://out-bkt/runs")
    job = scheduler.wait_status("torn-2", "SUCCEEDED")

    assert buckets.bucket("out-bkt").blob("runs/torn-2/attempt-1/upper.txt").download_as_bytes() == b"ALPHA BETA\n"
    assert "zen: staged 1 file, 11 B in" in job.message  # downloaded, not served from the cache
    assert storage.state.downloads["data-bkt/corpus/words.txt"] == 2
    assert the_entry(work / ".cache" / "vm-a").read_bytes() == b"alpha beta\n"  # kept again, whole


def test_a_torn_entry_of_the_right_size_is_dropped_at_its_first_hit_after_a_restart(buckets, storage, tmp_path):
    stage(tmp_path, InputCache(tmp_path / "cache", 10_000), ["gs://data-bkt/corpus/words.txt"], "j1")
    the_entry(tmp_path / "cache").write_bytes(b"alpha\0\0\0\0\0\n")  # its length, a block of it never written

    restarted = InputCache(tmp_path / "cache", 10_000)
    again = stage(tmp_path, restarted, ["gs://data-bkt/corpus/words.txt"], "j2")
    third = stage(tmp_path, restarted, ["gs://data-bkt/corpus/words.txt"], "j3")

    assert (again.input_dir / "words.txt").read_bytes() == b"alpha beta\n"
    assert (third.input_dir / "words.txt").read_bytes() == b"alpha beta\n"
    assert storage.state.downloads["data-bkt/corpus/words.txt"] == 2  # the first job's, and once after the restart
    assert (again.staged.cached_bytes, third.staged.cached_bytes) == (0, 11)


def test_a_sound_entry_is_still_a_hit_after_a_restart(buckets, storage, tmp_path):
    stage(tmp_path, InputCache(tmp_path / "cache", 10_000), ["gs://data-bkt/corpus/words.txt"], "j1")

    restarted = InputCache(tmp_path / "cache", 10_000)
    again = stage(tmp_path, restarted, ["gs://data-bkt/corpus/words.txt"], "j2")

    assert (again.input_dir / "words.txt").read_bytes() == b"alpha beta\n"
    assert again.staged.cached_bytes == 11 and storage.state.downloads["data-bkt/corpus/words.txt"] == 1


def test_an_entry_of_a_gzip_encoded_object_found_after_a_restart_is_downloaded_again(tmp_path):
    """Served decompressed, such an object's bytes do not have its checksum (that of the compressed bytes): an entry an
    earlier agent kept cannot be checked, so it is not trusted."""
    blob = SimpleNamespace(bucket=SimpleNamespace(name="data-bkt"), name="logs.txt", generation=1, crc32c="AAAAAA==",
                           md5_hash=None, size=30, content_encoding="gzip")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / str(object_key(blob))).write_bytes(b"")  # torn, as the restart finds it
    downloads: list[Path] = []

    def download(path: Path) -> None:
        downloads.append(path)
        path.write_bytes(b"decompressed log lines\n")

    cache = InputCache(tmp_path / "cache", 10_000)
    hit = cache.fetch(blob, tmp_path / "target", download)

    assert not hit and downloads == [tmp_path / "target"]
    assert (tmp_path / "target").read_bytes() == b"decompressed log lines\n"
    assert cache.fetch(blob, tmp_path / "again", download) and len(downloads) == 1  # kept by this agent: a hit
