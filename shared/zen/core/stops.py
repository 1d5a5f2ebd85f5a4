"""What a STOP's reason tells the agent: a queue's preemption's begins ``PREEMPTED`` (the job runs again
later, so the agent makes ZEN_PREEMPTION_NOTICE appear: time to checkpoint); a user's never does
(``users``), since a job that tells the two apart would save for a rerun that never comes. And what its
``MOVES`` attribute tells it: whether its deadline (``answer_within_s``) replaces the one before (``moves``)."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Mapping

PREEMPTED = "preempted: "
# A STOP's attribute beside ``answer_within_s``: "1" where Zen's wait counts from the VM's last RUNNING (a job its
# queue took back, a gang losing a node: zen.core.silence.stop_left_s), so each STOP's deadline replaces the one
# made before it (zen.agent.reports.AttemptReport.stopped); "0" where it counts from the stop (a user's), so the
# earliest holds.
MOVES = "answer_moves"
# And when Zen made the STOP (ISO 8601, UTC): what ``answer_within_s`` counts from. The outbox may publish it later
# (a publish that failed, sent again at the next tick) or twice (one whose result was lost), so the agent counts from
# this, not Pub/Sub's publish time, and orders the STOPs by it (zen.agent.reports.AttemptReport.stopped).
MADE = "answer_made"


def preempts(reason: str | None) -> bool:
    """Whether a STOP's ``reason`` is a queue's preemption's (the agent makes ZEN_PREEMPTION_NOTICE appear)."""
    return (reason or "").startswith(PREEMPTED)


def users_reason(reason: str | None) -> str:
    """A user's stop reason as Zen keeps it and its STOP carries it: one that would read as a preemption's is
    marked as the user's."""
    text = reason or "stop requested"
    return f"stopped: {text}" if preempts(text) else text


def moves(attributes: Mapping[str, str], reason: str | None) -> bool:
    """Whether a STOP's deadline replaces the one before, as its ``MOVES`` attribute says; a STOP without it (from
    a Zen before it) by its reason: a queue's preemption's moves. (A gang's node stopped for a peer lost or failed
    is told a reason that may be no preemption's, yet Zen's wait for it moves: only the attribute says so.)"""
    said = attributes.get(MOVES)
    return said == "1" if said in ("0", "1") else preempts(reason)


def made_attribute(made: datetime) -> str:
    """A STOP's ``MADE`` attribute: ``made`` in UTC, to the microsecond."""
    return made.astimezone(timezone.utc).isoformat(timespec="microseconds")


def made_at(attributes: Mapping[str, str]) -> datetime | None:
    """When Zen made a STOP, as its ``MADE`` attribute says (UTC); None without it (a Zen before it) or unreadable."""
    try:
        made = datetime.fromisoformat(attributes.get(MADE) or "")
    except ValueError:
        return None
    return made.replace(tzinfo=timezone.utc) if made.tzinfo is None else made


def answer_within(text: str | None) -> float | None:
    """A STOP's ``answer_within_s`` (Zen sets it; an order without it leaves the attempt unbounded)."""
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value >= 0 else None
