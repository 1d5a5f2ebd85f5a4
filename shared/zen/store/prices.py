"""The catalog's prices in Postgres (``vm_prices``) and their daily refresh by the scale tick
(``refresh_if_stale``): one cheap query when they are fresh; a failed fetch keeps the old prices and is
tried again an hour later. ``current`` lays the snapshot under and the configuration over them
(``zen.core.prices.effective``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Collection

from zen.core.prices import MAX_AGE_S, Price, PriceTable, Pricing, effective, load_snapshot
from zen.core.text import escape_unstorable

if TYPE_CHECKING:
    from zen.store.db import Database, Session

RETRY_AFTER_S = 3600.0  # after a failed fetch, the tick tries again this much later


@dataclass(frozen=True)
class Refresh:
    outcome: str  # "fresh" (nothing to do), "refreshed", "failed" (old prices kept), "waiting" (failed lately)
    prices: int = 0  # rows written
    error: str | None = None


def stored(session: Session) -> PriceTable:
    """The catalog's prices as last stored (source ``catalog``)."""
    rows = session.sql("SELECT machine_type, region, model, usd_per_hour, fetched_at FROM vm_prices")
    return PriceTable({(r["machine_type"], r["region"], r["model"]): Price(float(r["usd_per_hour"]), "catalog",
                                                                          r["fetched_at"]) for r in rows})


def current(session: Session | None, pricing: Pricing, snapshot: PriceTable | None = None) -> PriceTable:
    """The prices Zen uses now: the snapshot, the stored catalog prices (none without a ``session`` or
    with ``pricing.catalog`` false), the configuration's overrides."""
    from zen.store.migrate import has_table

    catalog = stored(session) if session is not None and pricing.catalog and has_table(session, "vm_prices") else None
    return effective(pricing, snapshot if snapshot is not None else load_snapshot(), catalog)


def store(session: Session, table: PriceTable, now: datetime) -> int:
    """Write ``table``'s prices (upserts: a price the catalog no longer lists stays as it was)."""
    for (machine, region, model), price in table.prices.items():
        session.sql("""INSERT INTO vm_prices (machine_type, region, model, usd_per_hour, fetched_at)
                       VALUES (:m, :r, :model, :usd, :at)
                       ON CONFLICT (machine_type, region, model)
                       DO UPDATE SET usd_per_hour = EXCLUDED.usd_per_hour, fetched_at = EXCLUDED.fetched_at""",
                    m=machine, r=region, model=model, usd=price.usd_per_hour, at=price.fetched_at or now)
    session.sql("UPDATE vm_price_refresh SET refreshed_at = :now, error = NULL WHERE id = 1", now=now)
    return len(table.prices)


def refresh_state(session: Session) -> dict[str, Any]:
    """The catalog refresh's record: when it was last tried and last refreshed, and the last try's error (None: it
    succeeded)."""
    [row] = session.sql("SELECT tried_at, refreshed_at, error FROM vm_price_refresh WHERE id = 1")
    return row


def _unpriced(session: Session, wanted: Collection[tuple[str, str]]) -> bool:
    """Whether some (machine type, region) of ``wanted`` has no stored catalog price."""
    if not wanted:
        return False
    rows = session.sql("SELECT DISTINCT machine_type, region FROM vm_prices")
    return bool(set(wanted) - {(r["machine_type"], r["region"]) for r in rows})


def refresh_if_stale(db: Database, fetch: Callable[[datetime], PriceTable], now: datetime,
                     max_age_s: float = MAX_AGE_S, retry_after_s: float = RETRY_AFTER_S,
                     wanted: Collection[tuple[str, str]] = ()) -> Refresh:
    """Fetch and store the catalog's prices when the stored ones are older than ``max_age_s``, or are
    older than ``retry_after_s`` and price none of a (machine type, region) of ``wanted`` (a cluster
    configured since: priced within the hour, not the day; one the catalog does not list costs a fetch an
    hour, so the tick leaves out machine types it cannot price at all: ``zen.core.prices.catalog_pairs``), and
    no fetch failed in the last ``retry_after_s``. A fetch that raises, or finds no price, keeps the old prices
    and records its error. The caller holds the tick's lock: one refresh at a time."""
    with db.transaction() as session:
        row = refresh_state(session)
        age = now - row["refreshed_at"] if row["refreshed_at"] is not None else None
        if age is not None and age < timedelta(seconds=max_age_s) and (
                age < timedelta(seconds=retry_after_s) or not _unpriced(session, wanted)):
            return Refresh("fresh")
        if (row["error"] is not None and row["tried_at"] is not None
                and now - row["tried_at"] < timedelta(seconds=retry_after_s)):
            return Refresh("waiting", error=row["error"])
        session.sql("UPDATE vm_price_refresh SET tried_at = :now WHERE id = 1", now=now)
    try:
        table = fetch(now)
        if not table.prices:
            raise LookupError("the catalog priced none of the configured machine types")
    except Exception as exc:  # any failure of the catalog: keep the old prices
        error = escape_unstorable(f"{type(exc).__name__}: {exc}", 1000)
        with db.transaction() as session:
            session.sql("UPDATE vm_price_refresh SET error = :error WHERE id = 1", error=error)
        return Refresh("failed", error=error)
    with db.transaction() as session:
        written = store(session, table, now)
    return Refresh("refreshed", prices=written)
