"""The fence: an attempt whose heartbeats no longer reach Zen is stopped before Zen runs its job elsewhere.

Zen takes an attempt whose VM has been silent for ``deadlines.heartbeat_timeout_s`` for lost: the sweep
(``zen.core.lifecycle.decide_silence``) requeues the job as the next attempt and sends this one STOP. A VM cut
off from Pub/Sub never gets that STOP, and its job ran on beside the new attempt: the same job twice.

So each attempt holds a lease on its job, renewed by every report of it that Pub/Sub accepted (its
publish returned without error; the CLAIMED that Zen answered with CONFIRM is the first):
``AttemptReport.accepted_at``, the agent's clock when that publish began (Zen heard it no earlier).
Once none has been accepted for ``fence_s`` the agent stops the job itself, as a STOP would (SIGTERM,
the stop grace, SIGKILL), or cuts the staging or the upload under way, so the job is dead before
Zen's deadline, and reports the attempt PREEMPTED with why (the final report retried within its
budget as any other)::

    fence_s = heartbeat_timeout_s - stop_grace_s - min(MARGIN_S, heartbeat_timeout_s / 4),
              never below MIN_BEATS heartbeat periods

By default 120 - 10 - 15 = 95 s; the demo's (20 s, 2 s grace, 2 s heartbeats) 20 - 2 - 5 = 13 s (a
fixed 15 s margin left only the floor, 6 s: three slow publishes on a loaded machine stopped a job Zen
still held for 14 s more). ``zen.core.lease.MARGIN_S`` covers what may run past the fence before the agent
looks: a VM heartbeat under way when it falls (a report's budget is 10 s at most; a RUNNING heartbeat's
own is cut to what is left of the fence), a control-message slice, the kill. The floor (``MIN_BEATS``
heartbeats) keeps the fence from stopping a job on one or two failed heartbeats; periods where the floor
would decide leave no margin, and are refused (``zen.core.lease.too_tight``: at load, and at agent start).

The agent is not the only one to hold the lease: an agent that is alive but cannot run (stopped,
deadlocked, starved of CPU, stalled on a disk) cannot stop its job, whose process runs on in a session of
its own. So the job's supervisor (``zen.agent.launch``) keeps the lease too: the agent renews it at every
accepted report (``RunningJob.renew``: the seconds left, stamped with CLOCK_MONOTONIC), and when it runs
out the supervisor stops the job itself on the same deadline and the same steps (SIGTERM, the stop grace,
``docker kill``, SIGKILL of the job's whole process group).

Why this ends the old process before Zen runs the next attempt (the lease arithmetic, in real time):
let ``A`` be when the publish of the attempt's last accepted report began (the agent's clock). Zen
records a report when it handles it (``last_heartbeat_at``, its own clock), which is after ``A``; the
sweep takes the attempt for lost no sooner than ``heartbeat_timeout_s`` after that, and only then
publishes the next attempt's start, which a VM must still pull and claim. The supervisor sends SIGTERM
at ``A + fence_s`` and SIGKILL at ``A + fence_s + stop_grace_s`` = ``A + heartbeat_timeout_s - margin``:
the old process is dead at least ``min(15 s, timeout / 4)`` before Zen can even decide. No clock is
compared across machines: each side measures an interval from one report, the agent from before it was
sent, Zen from after it arrived; the margin covers the clocks' rates, the kill itself, and Zen's sweep
and heartbeat handlers running on different instances. What the margin does not cover, and is refused
at load (``zen.core.config.Deadlines``) and at the agent's start (an environment that overrides the periods):
periods where the floor decides (``zen.core.lease.too_tight``).

Why PREEMPTED: by then the sweep has most likely requeued the job, and this attempt's final report is
stale to Zen and ignored (``zen.core.lifecycle._stale_attempt``). If it reaches Zen sooner (the network came
back just before the deadline), PREEMPTED does what the sweep's LOST would have done: the job is
requeued (``zen.core.lifecycle._advance``: without spending an attempt, ``FREE_PREEMPTIONS`` times; a job
being stopped ends CANCELLED, one being preempted for a queue goes back to PENDING). FAILED would end
the job for good for the network's fault, STOPPED would cancel it.
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
    if fence_left(attempt, settings, now) > 0:
        return None
    silent = now - attempt.accepted_at
    return (f"zen: stopped{f' while {what}' if what else ''}: no heartbeat reached Zen for {silent:.0f} s "
            "(it would have taken the job for lost and run it elsewhere)")
