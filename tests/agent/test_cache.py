"""The agent's warm cache (zen.agent.cache) with the official Cloud Storage client against the stand-in:
a hit is never downloaded again (the stand-in counts its media reads), a new generation is, the bound
evicts the least recently used, a bad entry is dropped, and the VM heartbeat reports what is held."""

from __future__ import annotations

import dataclasses

import pytest
from google.cloud import storage as gcs

from zen.agent.cache import InputCache
from zen.agent.staging import AttemptData
from zen.core.models import InputSpec, VmState
from zen.core.vm_heartbeat import VmHeartbeat


@pytest.fixture
def client(storage):
    client = gcs.Client()
    client.create_bucket("data-bkt")
    bucket = client.bucket("data-bkt")
    bucket.blob("corpus/words.txt").upload_from_string(b"alpha beta\n")
    bucket.blob("shards/part-0").upload_from_string(b"0" * 100)
    bucket.blob("shards/part-1").upload_from_string(b"1" * 100)
    return client


def stage(tmp_path, cache: InputCache, uris, job_id="j") -> AttemptData:
    data = AttemptData(job_id, 1, [InputSpec(uri=uri) for uri in uris], None, tmp_path / "work", cache=cache)
    data.prepare()
    data.stage()
    return data


def test_a_hit_is_copied_from_the_cache_and_not_downloaded_again(client, storage, tmp_path):
    cache = InputCache(tmp_path / "cache", 10_000)
    first = stage(tmp_path, cache, ["gs://data-bkt/corpus/words.txt", "gs://data-bkt/shards/"], "j1")
    second = stage(tmp_path, cache, ["gs://data-bkt/corpus/words.txt", "gs://data-bkt/shards/"], "j2")

    assert storage.state.downloads == {"data-bkt/corpus/words.txt": 1, "data-bkt/shards/part-0": 1,
                                       "data-bkt/shards/part-1": 1}  # once each, for the first job only
    assert (first.staged.bytes, first.staged.cached_bytes) == (211, 0)
    assert (second.staged.bytes, second.staged.cached_bytes) == (0, 211)
    assert (second.input_dir / "shards" / "part-1").read_bytes() == b"1" * 100
    assert "3 files, 0 B (and 211 B from the cache) in" in second.summary()
    assert (cache.hits, cache.misses) == (3, 3)


def test_a_new_generation_is_downloaded_and_a_job_changing_its_copy_leaves_the_cache_alone(client, storage, tmp_path):
    cache = InputCache(tmp_path / "cache", 10_000)
    first = stage(tmp_path, cache, ["gs://data-bkt/corpus/words.txt"], "j1")
    (first.input_dir / "words.txt").write_bytes(b"scribbled by the job")
    assert (stage(tmp_path, cache, ["gs://data-bkt/corpus/words.txt"], "j2").input_dir / "words.txt").read_bytes() \
        == b"alpha beta\n"
    client.bucket("data-bkt").blob("corpus/words.txt").upload_from_string(b"gamma\n")  # a new generation

    third = stage(tmp_path, cache, ["gs://data-bkt/corpus/words.txt"], "j3")

    assert (third.input_dir / "words.txt").read_bytes() == b"gamma\n"
    assert storage.state.downloads["data-bkt/corpus/words.txt"] == 2


def test_the_bound_evicts_the_least_recently_used_and_a_restart_keeps_the_rest(client, storage, tmp_path):
    cache = InputCache(tmp_path / "cache", 250)  # room for two 100-byte shards and the 11-byte file, not more
    stage(tmp_path, cache, ["gs://data-bkt/shards/part-0"], "j1")
    stage(tmp_path, cache, ["gs://data-bkt/shards/part-1"], "j2")
    stage(tmp_path, cache, ["gs://data-bkt/shards/part-0"], "j3")  # part-0 used again: part-1 is now the oldest
    client.bucket("data-bkt").blob("big").upload_from_string(b"b" * 120)
    stage(tmp_path, cache, ["gs://data-bkt/big"], "j4")

    assert cache.report()[0] == ["gs://data-bkt/big", "gs://data-bkt/shards/part-0"]  # part-1 was evicted
    assert sum(p.stat().st_size for p in (tmp_path / "cache").iterdir()) <= 250
    restarted = InputCache(tmp_path / "cache", 250)
    stage(tmp_path, restarted, ["gs://data-bkt/shards/part-0", "gs://data-bkt/shards/part-1"], "j5")
    assert storage.state.downloads["data-bkt/shards/part-0"] == 1  # still warm after the restart
    assert storage.state.downloads["data-bkt/shards/part-1"] == 2


def test_an_entry_of_the_wrong_size_is_dropped_and_downloaded(client, storage, tmp_path):
    cache = InputCache(tmp_path / "cache", 10_000)
    stage(tmp_path, cache, ["gs://data-bkt/corpus/words.txt"], "j1")
    [entry] = (tmp_path / "cache").iterdir()
    entry.write_bytes(b"torn")

    again = stage(tmp_path, cache, ["gs://data-bkt/corpus/words.txt"], "j2")

    assert (again.input_dir / "words.txt").read_bytes() == b"alpha beta\n"
    assert storage.state.downloads["data-bkt/corpus/words.txt"] == 2
    assert entry.read_bytes() == b"alpha beta\n"  # kept again, whole


def test_no_cache_when_its_bound_is_0(client, storage, tmp_path):
    cache = InputCache(tmp_path / "cache", 0)
    stage(tmp_path, cache, ["gs://data-bkt/corpus/words.txt"], "j1")
    stage(tmp_path, cache, ["gs://data-bkt/corpus/words.txt"], "j2")
    assert storage.state.downloads["data-bkt/corpus/words.txt"] == 2
    assert cache.report() == (None, None) and not (tmp_path / "cache").exists()


def test_the_vm_heartbeat_reports_the_inputs_held_and_the_images_run(client, tmp_path):
    from tests.agent.fakes import FakeTransport
    from tests.agent.test_agent_loop import SETTINGS, VM, make_agent

    transport = FakeTransport(VM)
    agent = make_agent(transport, dataclasses.replace(SETTINGS, work_dir=str(tmp_path / "work"), cache_bytes=10_000))
    stage(tmp_path, agent.cache, ["gs://data-bkt/shards/"], "j1")
    agent.cache.ran_image("us-docker.pkg.dev/p/r/train@sha256:" + "a" * 64)
    agent.vm_beats.beat(VmState.IDLE, force=True)

    [beat] = [m for m in transport.published if isinstance(m, VmHeartbeat)]
    assert beat.cached_inputs == ["gs://data-bkt/shards/"]
    assert beat.images == ["us-docker.pkg.dev/p/r/train@sha256:" + "a" * 64]
    assert VmHeartbeat.model_validate_json(beat.to_bytes()) == beat



def test_two_attempts_keeping_one_object_at_once_never_share_a_partial_file(tmp_path, monkeypatch):
    """Two attempts on one VM (max_jobs_per_vm > 1) miss on the same object together:
    each copies into a partial file of its own. With one shared partial file, the second writer's
    open truncated the first's copy, which then went into the cache with a hole of zeros while the
    second had not yet rewritten it: a third attempt hitting then read corrupt input."""
    import itertools
    import shutil
    import threading
    from types import SimpleNamespace

    import zen.agent.cache as cache_module

    content = bytes(range(1, 256)) * 256
    half = len(content) // 2
    source = tmp_path / "source"
    source.write_bytes(content)
    blob = SimpleNamespace(bucket=SimpleNamespace(name="b"), name="o", generation=1, crc32c="c", md5_hash="m",
                           size=len(content))
    roles = itertools.count()
    first_wrote_half, second_opened, third_read = threading.Event(), threading.Event(), threading.Event()
    real_copy = shutil.copyfile

    def racing_copy(src, dst):
        if next(roles) == 0:  # the first writer: half, then the rest once the second has opened its file
            with open(dst, "wb") as kept:
                kept.write(content[:half])
                kept.flush()
                first_wrote_half.set()
                second_opened.wait(10)
                kept.write(content[half:])
        else:  # the second writer opens (truncating, if it is the same file) and writes only later
            first_wrote_half.wait(10)
            with open(dst, "wb") as kept:
                second_opened.set()
                third_read.wait(10)
                kept.write(content)
        return dst

    monkeypatch.setattr(cache_module.shutil, "copyfile", racing_copy)
    cache = InputCache(tmp_path / "cache", 10**6)
    misses = [threading.Thread(target=cache.fetch, args=(blob, tmp_path / f"t{n}", lambda t: real_copy(source, t)))
              for n in range(2)]
    for thread in misses:
        thread.start()
    misses[0].join(timeout=20)
    monkeypatch.setattr(cache_module.shutil, "copyfile", real_copy)
    hit = cache.fetch(blob, tmp_path / "third", lambda t: real_copy(source, t))
    third_read.set()
    misses[1].join(timeout=20)
    assert hit and (tmp_path / "third").read_bytes() == content
    assert not list((tmp_path / "cache").glob("*.part"))
