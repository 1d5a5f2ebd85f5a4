"""A warm-cache hit whose copy into the attempt's ``ZEN_INPUT_DIR`` meets a full work disk while the cache holds other
entries it could give back: a download meeting a full disk made the cache give way and was tried again, but a hit's
copy did not, so the staging failed at once as the VM's disk fault (the job requeued, three in a row retiring the
VM) for space the cache held. The hit's copy makes the cache give way too, the entry it copies kept to the last.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from tests.agent.test_staging import client  # noqa: F401 (fixture)
from zen.agent.cache import InputCache
from zen.agent.diskquota import measure
from zen.agent.staging import AttemptData
from zen.core.models import InputSpec

SIZE = 100_000  # each object staged
ROOM = 250_000  # the (fake) work disk holds this much: the cache's two entries and one attempt's copy do not fit


def stage(work, cache, job_id: str, uri: str) -> AttemptData:
    data = AttemptData(job_id, 1, [InputSpec(uri=uri)], None, work, cache=cache)
    data.prepare()
    data.stage()
    return data


def test_a_hit_on_a_full_disk_makes_the_cache_give_way_and_keeps_its_own_entry(client, tmp_path, monkeypatch):
    bucket = client.bucket("data-bkt")
    bucket.blob("sets/one").upload_from_string(b"1" * SIZE)
    bucket.blob("sets/two").upload_from_string(b"2" * SIZE)
    work = tmp_path / "work"
    cache = InputCache(work / ".cache" / "vm-1", 10 * SIZE)
    for n, name in enumerate(("one", "two")):  # earlier jobs on this VM: both kept, "one" the least recently used
        stage(work, cache, f"j{n}", f"gs://data-bkt/sets/{name}").cleanup()
    assert len(cache._entries) == 2
    copy = shutil.copyfile

    def on_a_small_disk(source, target, *args, **kwargs):  # a copy into an attempt's directory finds the disk full
        if cache.directory not in Path(target).parents and measure(work).bytes + SIZE > ROOM:
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        return copy(source, target, *args, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", on_a_small_disk)
    data = stage(work, cache, "j2", "gs://data-bkt/sets/one")

    assert (data.input_dir / "one").read_bytes() == b"1" * SIZE
    assert data.staged.cached_bytes == SIZE and data.staged.bytes == 0  # the hit's copy, nothing downloaded
    assert [path.name for path in cache.directory.iterdir()] == list(cache._entries)  # "two" gave way, not "one"
    assert cache.report()[0] == ["gs://data-bkt/sets/one"]
