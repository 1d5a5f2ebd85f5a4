"""The threads a function instance makes its Compute reads on: one pool per process, built on first use.

Several MIGs are read at once (the tick reads every MIG of every cluster, a pass a cluster's), each read a few
bounded Compute calls (``zen.adapters.compute``)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

# Compute calls made at once (reads of different MIGs): the tick's time is MIGs / this, and 8 keeps a
# 100-MIG tick's ~300 reads far inside the Compute API's per-project read-request rate.
COMPUTE_CONCURRENCY = 8
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def compute_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=COMPUTE_CONCURRENCY, thread_name_prefix="zen-compute")
        return _pool
