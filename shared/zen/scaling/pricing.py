"""The prices the planner ranks pools by in production: each cluster's pools priced from the table Zen
uses (``zen.store.prices.current``: the snapshot, the catalog's prices kept in Postgres, the overrides),
read at most every ``PRICES_TTL_S`` per instance, so a pass costs no query for them.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from zen.core.config import ClusterConfig
from zen.core.prices import PriceTable, pool_prices
from zen.core.provisioning import pool_key
from zen.scaling.model import Pool

log = logging.getLogger("zen.scaling")

PRICES_TTL_S = 600.0  # the catalog's prices change daily at most; overrides with a deploy


def cluster_pools(cluster: ClusterConfig, prices: dict[str, float] | None = None) -> dict[str, Pool]:
    """The cluster's pools in its order (``zen.core.provisioning``), priced from ``prices`` (pool -> USD per
    VM-hour) where given."""
    models, prices = cluster.provisioning, prices or {}
    return {pool_key(r, m, models[0]): Pool(r, m, prices.get(pool_key(r, m, models[0])))
            for r in cluster.regions for m in models}


class PoolPrices:
    """Prices each cluster's pools from ``read()`` (None: every pool unpriced), kept ``ttl_s``; a failed
    read logs and keeps the last table (unpriced before the first)."""

    def __init__(self, read: Callable[[], PriceTable] | None, ttl_s: float = PRICES_TTL_S):
        self._read, self._ttl_s = read, ttl_s
        self._table: PriceTable | None = None
        self._read_at = -float("inf")
        self._lock = threading.Lock()
        self._made: dict[str, tuple[PriceTable | None, dict[str, Pool]]] = {}  # cluster -> (its table, its pools)

    def pools(self, cluster: ClusterConfig) -> dict[str, Pool]:
        """The cluster's pools at the current prices: the same dict while the table is the same."""
        table = self._current()
        made = self._made.get(cluster.name)
        if made is None or made[0] is not table:
            priced = {} if table is None else {
                key: price.usd_per_hour for key, price in pool_prices(table, cluster).items() if price is not None}
            made = self._made[cluster.name] = (table, cluster_pools(cluster, priced))
        return made[1]

    def _current(self) -> PriceTable | None:
        if self._read is None:
            return None
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= self._ttl_s:
                self._read_at = now
                try:
                    self._table = self._read()
                except Exception as exc:  # noqa: BLE001 - unpriced or stale prices never stop scaling
                    log.warning("could not read the prices; the pools keep their last ones", extra={"error": str(exc)})
            return self._table
