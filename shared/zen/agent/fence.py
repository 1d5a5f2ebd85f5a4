"""The fence: an attempt whose heartbeats no longer reach Zen is stopped before Zen runs its job elsewhere.

Each attempt holds a lease, renewed by every report of it that Pub/Sub accepted; once none has been
accepted for ``fence_s`` (``zen.core.lease``: Zen's ``heartbeat_timeout_s`` less the stop grace and a
margin, 95 s by default) the agent stops the job as a STOP would, or cuts its staging or upload, and
reports it PREEMPTED. The job's supervisor (``zen.agent.launch``) keeps the same lease.
Why, and the arithmetic: docs/reference/agent.md#the-fence
"""

from __future__ import annotations

import math

from zen.agent.reports import AttemptReport
from zen.agent.settings import AgentSettings
from zen.core import lease


def fence_s(settings: AgentSettings) -> float:
    """Seconds without an accepted report after which an attempt is stopped (the rule above, ``zen.core.lease``)."""
    return lease.fence_s(settings.heartbeat_timeout_s, settings.stop_grace_s, settings.heartbeat_s)


def fence_left(attempt: AttemptReport, settings: AgentSettings, now: float) -> float:
    """Seconds until the attempt's fence falls (0 or less: fallen); infinite before any report of it was accepted."""
    if attempt.accepted_at is None:
        return math.inf
    return attempt.accepted_at + fence_s(settings) - now


def fenced(attempt: AttemptReport, settings: AgentSettings, now: float, what: str = "") -> str | None:
    """The final report's note once the attempt's fence fell (``what``: the transfer it cut); else None."""
    if attempt.accepted_at is None or fence_left(attempt, settings, now) > 0:
        return None
    silent = now - attempt.accepted_at
    return (f"zen: stopped{f' while {what}' if what else ''}: no heartbeat reached Zen for {silent:.0f} s "
            "(it would have taken the job for lost and run it elsewhere)")
