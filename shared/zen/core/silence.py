"""When Zen takes a silent attempt for lost (pure): the lost-job sweep's decision on a job whose VM, or a gang's node,
went silent past its deadline (``decide_silence``), and how long a STOPPING job's VM has left to answer before the
sweep ends it unheard (``stop_left_s``). The rule: an attempt is waited for the longer of the configuration's
``heartbeat_timeout_s`` and the one its fence stated (``Job.fence_timeout_s``, a gang's its nodes' longest:
``zen.core.lease.attempt_deadlines``), so it never runs again while that fence may be up; silence counts only
while Zen could hear (``silent_for``). Why the fence ends a job first: ``zen.agent.fence``."""

from __future__ import annotations

from datetime import datetime, timedelta

from zen.core import gang_ends
from zen.core.gang_records import ENDED, SILENT, most_silent
from zen.core.lease import Deadlines, attempt_deadlines
from zen.core.lifecycle import Change, Decision, back_to_pending, lose_attempt
from zen.core.models import Job, JobStatus


def silent_for(last: datetime, now: datetime, heard_since: datetime | None = None,
               heard_until: datetime | None = None) -> timedelta:
    """How long a VM last heard at ``last`` has been silent as far as Zen can know: from its last report, or from
    when Zen could hear again after an outage (``heard_since``), to now, or to how far the heartbeat path is
    vouched for (``heard_until``: ``zen.jobs.probes``): the lost-job sweep's measure, a gang's or one VM's."""
    return min(now, heard_until or now) - max(last, heard_since or last)


def lost_at(last: datetime, now: datetime, timeout_s: float, heard_since: datetime | None = None,
            heard_until: datetime | None = None) -> datetime:
    """When a VM last heard at ``last`` had been silent ``timeout_s`` as ``silent_for`` counts, ``now`` at the latest:
    what an attempt left silent is billed to (the sweep ended it then), for one whose stop went unanswered."""
    return now - max(timedelta(0), silent_for(last, now, heard_since, heard_until) - timedelta(seconds=timeout_s))


def deadlines_for(job: Job, deadlines: Deadlines) -> Deadlines:
    """The configuration's ``deadlines`` as the sweep holds ``job``'s attempt to them: its fence's longer
    ``heartbeat_timeout_s`` (from a longer configuration, stated at its claim), if any, waited for."""
    return attempt_deadlines(deadlines, job.fence_timeout_s)


def decide_silence(job: Job, now: datetime, deadlines: Deadlines, heard_since: datetime | None = None,
                   heard_until: datetime | None = None) -> Decision | None:
    """The sweep, for any job: ``None`` when the job is fine. ``heard_since``: when Zen could record heartbeats
    again after an outage; silence counts from then. ``heard_until``: how far the heartbeat path is vouched for
    (``zen.jobs.probes``); silence counts to then. A gang's silence is its most silent node's, named in the
    reason (``gang_ends.settle``); its deadlines are its nodes' longest fence, kept from its completion."""
    if not gang_ends.is_gang(job) or not job.gang:
        return decide_one_vm(job, now, deadlines, heard_since, heard_until)
    deadlines = deadlines_for(job, deadlines)
    if gang_ends.losing_node(job):  # unanswered: rerun once a node cut off from Zen has surely ended it (its fence)
        quiet = silent_for(job.last_heartbeat_at or job.updated_at, now, heard_since, heard_until)
        if quiet.total_seconds() < deadlines.preempted_stop_s:
            return None
        return gang_ends.settle(job, list(job.gang), job.gang[0], now)
    silent = most_silent(job.gang)
    decision = decide_one_vm(job.model_copy(update={"vm": silent.vm}), now, deadlines, heard_since, heard_until)
    if decision is None:
        return None
    named = f"node {silent.rank} ({silent.vm})"
    decision.changes = [Change(c.to, c.reason.replace(silent.vm, named, 1)) for c in decision.changes]
    # The others heard within the timeout (the rest are as surely silent): stopped first, the silent one told STOP
    # too (it may be alive but cut off), and charged to now, as one VM.
    heard = min(now, heard_until or now) - timedelta(seconds=deadlines.heartbeat_timeout_s)
    others = [n for n in job.gang
              if n.status not in ENDED and n.vm != silent.vm and max(n.beat_at, heard_since or n.beat_at) > heard]
    if others and job.status in (JobStatus.ASSIGNED, JobStatus.RUNNING):
        why = decision.changes[0].reason
        silenced = [n.model_copy(update={"status": SILENT, "beat_at": now}) if n == silent else n for n in job.gang]
        return gang_ends.stop_first(job, [silent, *others], f"{why}: the other nodes are stopped before the rerun",
                                    gang_ends.told(job, why, True), now, gang=silenced)
    return gang_ends.for_gang(job.model_copy(update={"vm": silent.vm}), decision)


def decide_one_vm(job: Job, now: datetime, deadlines: Deadlines, heard_since: datetime | None = None,
                  heard_until: datetime | None = None) -> Decision | None:
    """``decide_silence`` for a job held by one VM (a gang's: its most silent node's, as such)."""
    if not job.status.holds_vm:
        return None
    deadlines = deadlines_for(job, deadlines)  # its agent's fence, from a longer timeout: waited
    silent = silent_for(job.last_heartbeat_at or job.updated_at, now, heard_since, heard_until)
    if job.status is JobStatus.STOPPING:  # a rerun waits the fence, from the VM's last RUNNING (decide_heartbeat)
        wait_s = deadlines.preempted_stop_s if job.preempted_by else deadlines.stop_timeout_s
        if silent < timedelta(seconds=wait_s):
            return None
        if job.preempted_by:  # its VM is silent: the attempt is over (a later report of it is stale)
            decision = back_to_pending(job, f"preempted: {job.preempted_by}; no answer from {job.vm}")
        else:
            why = f"no answer from {job.vm} within {deadlines.stop_timeout_s:g}s of stop"
            decision = Decision(changes=[Change(JobStatus.CANCELLED, why)], fields={"finished_at": now})
        # Billed as if left alone: to its VM's (a gang's node's) last report and the timeout after it.
        heard = max([job.heard_at or now, *(n.beat_at for n in job.gang or ())])
        decision.ended_at = lost_at(heard, now, deadlines.heartbeat_timeout_s, heard_since, heard_until)
        return decision
    if silent < timedelta(seconds=deadlines.heartbeat_timeout_s):
        return None
    decision = lose_attempt(job, f"no heartbeat from {job.vm} for {deadlines.heartbeat_timeout_s:g}s")
    if decision.changes[-1].to is JobStatus.FAILED:
        decision.fields["finished_at"] = now
    return decision


def stop_left_s(job: Job, now: datetime, deadlines: Deadlines, losing: bool = False) -> float | None:
    """Seconds the VM of a STOPPING job has left to report before the sweep ends it unheard (``decide_silence``:
    ``stop_timeout_s`` from the stop; ``preempted_stop_s`` by its agents' fence, from its last RUNNING, for one its
    queue took back or a gang ``losing`` a node); else None. Its STOPs carry it (``answer_within_s``): saves end then."""
    if job.status is not JobStatus.STOPPING or job.last_heartbeat_at is None:
        return None
    fence = deadlines_for(job, deadlines)  # as the sweep waits
    wait_s = fence.preempted_stop_s if job.preempted_by or losing else deadlines.stop_timeout_s
    return max(0.0, wait_s - (now - job.last_heartbeat_at).total_seconds())
