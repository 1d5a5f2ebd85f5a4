"""What a STOP's reason tells the agent: a queue's preemption's begins ``PREEMPTED`` (the job runs again
later, so the agent makes ZEN_PREEMPTION_NOTICE appear: time to checkpoint); a user's never does
(``users``), since a job that tells the two apart would save for a rerun that never comes."""

from __future__ import annotations

PREEMPTED = "preempted: "


def preempts(reason: str | None) -> bool:
    """Whether a STOP's ``reason`` is a queue's preemption's (the agent makes ZEN_PREEMPTION_NOTICE appear)."""
    return (reason or "").startswith(PREEMPTED)


def users_reason(reason: str | None) -> str:
    """A user's stop reason as Zen keeps it and its STOP carries it: one that would read as a preemption's is
    marked as the user's."""
    text = reason or "stop requested"
    return f"stopped: {text}" if preempts(text) else text
