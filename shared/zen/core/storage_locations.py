"""Cloud Storage's bucket locations by name, as Zen places jobs by them (``zen.core.locality``): the regions inside each
multi- and predefined dual-region, each location's continent, and which names ``data.bucket_locations`` may give
(``location_problem``, checked at load). The rules: docs/how-to/data-placement.md (Data locality).
"""

from __future__ import annotations

import re

# The regions inside each multi- and dual-region: a multi-region's by prefix, less those it stores nothing in (the US
# one is the United States': no Canadian region; EU's is not in europe-west2 or europe-west6); a predefined dual-region
# is its two regions exactly (each was any region of its continent: a job's start went first to a region 1 of 2 from its
# data, and `zen explain` priced its reads at the same multi-region's rate). A dual-region stores its data in each of
# its two: read there, it crosses no region, and Cloud Storage charges no transfer (distance 0, as its own region's).
MULTI_REGIONS: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    "us": (("us-",), frozenset()), "eu": (("europe-",), frozenset({"europe-west2", "europe-west6"})),
    "asia": (("asia-",), frozenset()),
}
DUAL_REGIONS = {
    "nam4": frozenset({"us-central1", "us-east1"}), "eur4": frozenset({"europe-north1", "europe-west4"}),
    "eur5": frozenset({"europe-west1", "europe-west2"}), "eur7": frozenset({"europe-west2", "europe-west3"}),
    "eur8": frozenset({"europe-west3", "europe-west6"}), "asia1": frozenset({"asia-northeast1", "asia-northeast2"}),
}
# The continent of a region by its name's prefix, and of a multi- or predefined dual-region by its name: Cloud Storage
# bills a read from another region of the same continent below one across continents (``data.egress_usd_per_gb``).
_CONTINENT_PREFIXES = (("us-", "northern-america"), ("northamerica-", "northern-america"),
                       ("southamerica-", "south-america"), ("europe-", "europe"), ("asia-", "asia"),
                       ("australia-", "oceania"), ("me-", "middle-east"), ("africa-", "africa"))
_CONTINENT_OF = {"us": "northern-america", "nam4": "northern-america", "eu": "europe", "eur4": "europe",
                 "eur5": "europe", "eur7": "europe", "eur8": "europe", "asia": "asia", "asia1": "asia"}
_REGION = re.compile(r"[a-z]+(-[a-z]+)+[0-9]+\Z")  # a Compute Engine region's name: us-central1, europe-west10


def location_problem(location: str) -> str | None:
    """Why ``location`` (as ``data.bucket_locations`` names one, any case) is no location Zen places by, or None. Such
    a name (``us-east1,us-west1``, ``us-east1 + us-west1``, a zone, a dual-region not listed) was of no continent or a
    region no VM is in: every region as far from it as the others, its jobs routed nowhere first, and their reads
    priced as across an ocean."""
    named = location.lower()
    regions = named.split("+")
    if named in MULTI_REGIONS or named in DUAL_REGIONS or (
            len(regions) <= 2 and len(set(regions)) == len(regions) and all(_REGION.match(r) for r in regions)):
        return None
    return (f"{location!r} is no Cloud Storage location: give a region (us-central1), a multi-region (US, EU, ASIA), "
            f"a predefined dual-region ({', '.join(sorted(DUAL_REGIONS)).upper()}) or a configurable dual-region's two "
            "regions joined by '+' (us-east1+us-west1)")


def continent(location: str) -> str | None:
    """The continent of a region (``us-east1``), a multi-region (``us``), a predefined dual-region (``nam4``) or a
    configurable one (``us-east1+us-west1``: its regions'); None for a name Zen does not know."""
    if location in _CONTINENT_OF:
        return _CONTINENT_OF[location]
    found = {next((c for prefix, c in _CONTINENT_PREFIXES if region.startswith(prefix)), None)
             for region in location.split("+")}
    return found.pop() if len(found) == 1 else None
