"""A simulator scenario as it is written: what its models would read otherwise than meant, or could not run.

pydantic reads YAML's ``yes`` as 1 and ``"600"`` as 600 where a number is expected (``checkpoint_every_s: yes``
checkpointed every second); :func:`numbers_as_written` finds every such value of the file, naming its field, as
``zen.core.cluster_config.Number`` refuses them in Zen's configuration. :func:`drawable` and
:func:`zones_listed` check a delay distribution and the ``zones:`` table.
Format: docs/reference/simulator.md#the-simulators-scenario-file
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from zen.core.cluster_config import written_as_number
from zen.core.documents import format_loc
from zen.scaling.model import Timing
from zen_dev.capacity.scenario import LognormalBoot
from zen_dev.capacity.yamllines import BOOLEAN

# A lognormal draw is median_s x e^(sigma z), |z| below 13 for Python's normal draws: within these, every draw
# is a finite float (a sigma of 1000 overflowed: OverflowError out of the run).
MAX_SIGMA = 10.0
MAX_MEDIAN_S = 1e9  # about 31 years
_TIMING_FLAGS = {("timing", name) for name, field in Timing.__dataclass_fields__.items() if field.type in (bool, "bool")}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _written_as_number(raw: Any) -> bool:
    """As Zen's configuration takes a number (``2.9e1`` too); capacity's ``unlimited`` is a word it takes."""
    return written_as_number(raw) or (isinstance(raw, str) and raw.strip().lower() == "unlimited")


def _refused(raw: Any, loc: tuple, key: bool = False) -> tuple[tuple, str]:
    """(where ``raw`` is written, a sentence naming its field): ``key``, a mapping's key (``loc`` ends with it)."""
    what = BOOLEAN if isinstance(raw, bool) else ""
    field = format_loc(loc[:-1] if key else loc)
    return loc, f"{field}: {'a key is ' if key else ''}a number, not {raw!r}{what}"


def numbers_as_written(raw: Any, value: Any, loc: tuple = ()) -> list[tuple[tuple, str]]:
    """Each (location, sentence) where ``value`` (``raw`` validated) holds a number that ``raw`` wrote as a
    boolean or as text: the value, or a mapping's key (``nodes: {yes: 1}``)."""
    out: list[tuple[tuple, str]] = []
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        for key, item in raw.items() if isinstance(raw, dict) else ():
            if isinstance(key, str) and key in fields:
                out += numbers_as_written(item, getattr(value, key), (*loc, key))
    elif isinstance(value, dict) and isinstance(raw, dict) and len(raw) == len(value):
        for (key, item), (read, item_read) in zip(raw.items(), value.items()):
            if _is_number(read) and not _written_as_number(key):
                out.append(_refused(key, (*loc, key), key=True))
            out += numbers_as_written(item, item_read, (*loc, key))
    elif isinstance(value, (list, tuple)) and isinstance(raw, list):
        for i, (item, item_read) in enumerate(zip(raw, value)):
            out += numbers_as_written(item, item_read, (*loc, i))
    elif _is_number(value) and not _written_as_number(raw):
        out.append(_refused(raw, loc))
    return out


def scenario_numbers(raw: dict[str, Any], spec: BaseModel, jobs: BaseModel | None) -> list[tuple[tuple, str]]:
    """:func:`numbers_as_written` of a whole scenario: ``spec`` is ``raw`` validated, ``jobs`` its ``jobs:``
    section (validated apart). A ``timing:`` field that is a flag (``spare_boots: false``) is a boolean."""
    found = numbers_as_written(raw, spec) + (numbers_as_written(raw["jobs"], jobs, ("jobs",)) if jobs else [])
    return [(loc, why) for loc, why in found if loc not in _TIMING_FLAGS]


def drawable(dist: Any) -> Any:
    """A delay distribution whose every draw is a finite number of seconds (a lognormal's sigma and median
    bounded), else a ValueError saying what is accepted."""
    if isinstance(dist, LognormalBoot):
        if dist.sigma > MAX_SIGMA:
            raise ValueError(f"sigma is at most {MAX_SIGMA:g} (got {dist.sigma:g}): a lognormal's draws reach "
                             "median_s x e^(12 sigma), too large for any number of seconds")
        if dist.median_s > MAX_MEDIAN_S:
            raise ValueError(f"median_s is at most {MAX_MEDIAN_S:g} s, about 31 years (got {dist.median_s:g})")
    return dist


def zones_listed(zones: dict[str, list[str]]) -> dict[str, list[str]]:
    """The ``zones:`` table: each region's zones in it, each once, at least one (leave a region out for its
    default zones), else a ValueError naming the region."""
    for region, listed in zones.items():
        if not listed:
            raise ValueError(f"{region} lists no zone: list at least one, or leave {region} out (its default zones)")
        for zone in listed:
            if not zone.startswith(region + "-"):
                raise ValueError(f"zone {zone} is not in region {region}")
            if listed.count(zone) > 1:
                raise ValueError(f"{region} lists zone {zone} twice: list each zone once")
    return zones
