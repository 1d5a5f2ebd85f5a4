"""A hit on the warm cache while the disk watch empties it (``InputCache.give_way``, from the watch's own thread):
an entry removed after the hit's copy was made, before the hit moved it to the recently used end, raised KeyError
out of ``fetch``: the attempt's staging failed on a copy already made whole, and the job with it."""

from __future__ import annotations

import os
from types import SimpleNamespace

from zen.agent.cache import InputCache

CONTENT = b"data" * 1000


def test_an_entry_given_way_just_after_its_hit_was_copied_leaves_the_hit_whole(tmp_path, monkeypatch):
    blob = SimpleNamespace(bucket=SimpleNamespace(name="b"), name="o", generation=1, crc32c="c", md5_hash="m",
                           size=len(CONTENT))
    cache = InputCache(tmp_path / "cache", 10**6)
    assert not cache.fetch(blob, tmp_path / "first", lambda target: target.write_bytes(CONTENT))  # kept
    real_utime = os.utime

    def then_give_way(path, *args, **kwargs):  # the watch's thread runs between the hit's copy and its bookkeeping
        real_utime(path, *args, **kwargs)
        if str(path).startswith(str(cache.directory)):
            assert cache.give_way(10**9) == len(CONTENT)

    monkeypatch.setattr(os, "utime", then_give_way)
    target = tmp_path / "second"
    cache.fetch(blob, target, lambda t: t.write_bytes(CONTENT))
    assert target.read_bytes() == CONTENT
    assert cache._bytes == sum(cache._entries.values())
