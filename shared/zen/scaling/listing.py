"""The tick's first Compute read: one ``list`` call per region gives every MIG there its target size and
stability (``MigPort.region_summaries``); the MIGs of a region whose list fails are each read on their own."""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Iterator

from zen.scaling.port import MigPort, MigSummary

log = logging.getLogger("zen.scaling")


def region_summaries(listers: Iterable[MigPort], map_: Callable[
        [Callable[[MigPort], dict[str, MigSummary]], Iterable[MigPort]], Iterator[dict[str, MigSummary]]]
                     ) -> dict[str, MigSummary]:
    """MIG name -> its summary, from one list call per region (``listers``: one MIG of each), made through ``map_``
    (concurrently)."""

    def summaries_of(mig: MigPort) -> dict[str, MigSummary]:
        try:
            return mig.region_summaries()
        except Exception as exc:  # noqa: BLE001 - each of its MIGs is then read on its own
            log.warning("could not list a region's MIGs", extra={"region": mig.region, "error": str(exc)})
            return {}

    summaries: dict[str, MigSummary] = {}
    for found in map_(summaries_of, listers):
        summaries.update(found)
    return summaries
