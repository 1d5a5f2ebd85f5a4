"""A work disk too full to stage a job's inputs while the warm cache holds space it could give back: the cache is
bounded by ``ZEN_AGENT_CACHE_BYTES`` alone (20 GB by default), whatever the disk has free, and a download that met a
full disk failed the staging at once, PREEMPTED as the VM's disk fault (requeued; three in a row retire the VM),
though removing cached objects, which no job needs, made room for it. The cache gives way (its least recently used
entries first) and the download is tried again; only a disk full without the cache fails the staging.
"""

from __future__ import annotations

import errno
import sys

from tests.agent.test_agent_loop import VM, start_message
from tests.agent.test_staging import client, run_one  # noqa: F401 (fixture)
from zen.agent.diskquota import measure
from zen.agent.staging import AttemptData
from zen.core.models import InputSpec

ENTRY = 100_000  # each of the cache's four entries
ROOM = 300_000  # the (fake) work disk holds this much, with the cache's 400 kB on it already


def test_the_cache_gives_way_to_an_input_the_full_disk_has_no_room_for(client, tmp_path, monkeypatch):
    work = tmp_path / "work"
    cache = work / ".cache" / VM
    cache.mkdir(parents=True)
    for n in range(4):  # kept by earlier jobs on this VM, far under the cache's bound
        (cache / f"{n:040x}").write_bytes(b"x" * ENTRY)
    fetch = AttemptData._fetch

    def on_a_small_disk(self, blob, target):  # what the work directory holds leaves no room: the disk is full
        if measure(work).bytes + blob.size > ROOM:
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        fetch(self, blob, target)

    monkeypatch.setattr(AttemptData, "_fetch", on_a_small_disk)
    script = "import os, pathlib; print(pathlib.Path(os.environ['ZEN_INPUT_DIR'], 'words.txt').read_text())"
    reports = run_one(tmp_path, start_message("staged-1", command=[sys.executable, "-c", script],
                                              inputs=[InputSpec(uri="gs://data-bkt/corpus/words.txt")]))

    final = reports[-1]
    assert final.status.value == "SUCCEEDED", final.message
    assert "alpha beta" in final.message
    assert len(list(cache.iterdir())) < 4  # the cache gave space back
