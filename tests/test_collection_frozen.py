"""The test processes' garbage collector after collection (``pytest_collection`` in tests/conftest.py): on again,
and what collection built frozen, so no full collection walks the test modules and their libraries again; kept
frozen after a simulator's run in the same process (``zen_dev.sim.world.World.run``, which unfroze everything)."""

from __future__ import annotations

import gc
import sys


def test_what_collection_built_is_frozen_and_the_collector_is_on():
    module = sys.modules[__name__]
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    tracked = gc.get_objects()
    assert not any(obj is module.__dict__ or obj is test_what_collection_built_is_frozen_and_the_collector_is_on
                   for obj in tracked)
