"""A timestamp on the wire: ISO 8601 with a timezone, stored and compared in UTC (``UtcTimestamp``)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Strict


def _iso_8601_text(value: Any) -> Any:
    # JSON has no timestamp type: accept its ISO 8601 string (or a datetime from Python callers), never
    # a number, which pydantic's lax mode would read as seconds since the epoch.
    if isinstance(value, (str, datetime)):
        return value
    raise ValueError("must be an ISO 8601 string with a timezone, e.g. 2026-11-21T10:00:00Z")


def _in_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError("is outside the range of UTC timestamps (years 1-9999 once converted to UTC)") from None


# A timestamp on the wire: ISO 8601 with a timezone, stored and compared in UTC.
UtcTimestamp = Annotated[AwareDatetime, Strict(False), BeforeValidator(_iso_8601_text), AfterValidator(_in_utc)]
