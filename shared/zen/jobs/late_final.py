"""A lost attempt's final report that comes after the sweep gave the attempt up (``zen.core.lifecycle``'s
one exception to "an older attempt is stale").

An agent cut off from Zen (a network partition; an agent killed and restarted after its job exited)
may send an attempt's final report after ``heartbeat_timeout_s``, once the sweep has taken the attempt
for lost and requeued the job as the next one (``lifecycle.lose_attempt``); it retries a final report
for up to 300 s. Taken as stale, it let a job that succeeded, or that failed on its own (which Zen
never retries), run again. The report is the job's outcome when all of these hold, read under the
job's row lock (``JobService._on_job``), so a claim of the next attempt and the report are ordered:
- it is final: SUCCEEDED or FAILED, the job's own outcome. STOPPED (the job stopped by the STOP the
  sweep sent) and PREEMPTED (the VM went away mid-run) stay stale: the requeue is right for both;
- it names an attempt older than the job's that the sweep took for lost: its ``attempt_usage`` row says
  LOST and its LOST history row is the sweep's (``actor`` sweep; not a preemption its VM reported);
- it comes from the VM that held that attempt (the row's ``vm``);
- no later attempt was held by a VM since (no later ``attempt_usage`` row) and none is now: the job is
  QUEUED or PENDING (an attempt whose claim was given back unanswered never ran). Once a later attempt
  is claimed the rerun goes on, and the report stays stale, as do reports from another VM, of older
  attempts, and the non-final ones.
The job then ends SUCCEEDED or FAILED with the report's exit code, message and ``finished_at``, as that
attempt: ``attempt`` goes back to it, with its VM, region and zone (the report's) and ``started_at``
(when its VM took it: the usage row). So ``zen jobs get``, the history row (``reason``: attempt N's
final report arrived after it was taken for lost; attempt N+1 never started) and the
``job.status_changed`` event all name the attempt that ran, and ``zen logs -f`` waits for that
attempt's final output entry, not for one of an attempt that never started. The next attempt's start
message (published, or still in the outbox) is harmless: a claim of it names an attempt above the
job's, of a job that is over, and is told RELEASE (``lifecycle.decide_heartbeat``; a RUNNING is told
STOP). The attempt's ``attempt_usage`` row says the outcome instead of LOST; its times stay (the VM was
the attempt's until the sweep gave it up). A redelivered report is then a duplicate of the last one.

Not undone: a job the sweep FAILED because that loss spent its attempt budget. FAILED is terminal and
was announced (``zen submit --wait`` returned, the queue's quota went to the next job, the user may
have resubmitted), and a job ends once (the transition table; the fault checks count a job that ends
twice as run twice): the report is ignored, with a reason saying what it was.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from zen.core.lifecycle import Change, Decision
from zen.core.models import AgentStatus, Heartbeat, Job, JobStatus

if TYPE_CHECKING:
    from zen.jobs.store import UsageRows

FINAL = {AgentStatus.SUCCEEDED: JobStatus.SUCCEEDED, AgentStatus.FAILED: JobStatus.FAILED}


def late_final(rows: UsageRows, job: Job, hb: Heartbeat, now: datetime) -> Decision | None:
    """What ``hb`` does when it is a lost attempt's late final report (above); None when it is not one
    (``lifecycle.decide_heartbeat`` decides). Reads only for a final report of an older attempt of a
    job that waits, or of the current attempt of a job that FAILED, from that attempt's VM."""
    if hb.status not in FINAL:
        return None
    waiting = job.status in (JobStatus.QUEUED, JobStatus.PENDING) and hb.attempt < job.attempt
    spent = (job.status is JobStatus.FAILED and hb.attempt == job.attempt and hb.vm == job.vm
             and hb.seq > job.last_seq)
    if not (waiting or spent):
        return None
    lost = rows.lost_attempt(job.job_id, hb.attempt)
    if lost is None or not lost["by_sweep"] or lost["later_held"] or lost["vm"] != hb.vm:
        return None
    if spent:
        return Decision(ignored=f"attempt {hb.attempt}'s final report ({_outcome(hb)}) arrived after it was "
                                f"taken for lost, which spent the attempt budget: the job stays FAILED "
                                f"(a job that is over is not changed; submit it again to run it)")
    return decide_late_final(job, hb, lost["started_at"], now)  # its usage row: JobService._record_usage


def decide_late_final(job: Job, hb: Heartbeat, started_at: datetime | None, now: datetime) -> Decision:
    """The job ends with the outcome of ``hb``'s attempt, as that attempt (the checks are ``late_final``'s)."""
    later = f"attempt {job.attempt}" if job.attempt == hb.attempt + 1 else f"attempts {hb.attempt + 1}-{job.attempt}"
    reason = (f"attempt {hb.attempt}'s final report ({_outcome(hb)}) arrived after it was taken for lost; "
              f"{later} never started")
    fields = dict(attempt=hb.attempt, vm=hb.vm, region=hb.region, zone=hb.zone, last_seq=hb.seq,
                  last_heartbeat_at=now, started_at=started_at, finished_at=now, exit_code=hb.exit_code)
    if hb.message is not None:
        fields["message"] = hb.message
    return Decision(changes=[Change(FINAL[hb.status], reason)], fields=fields)


def _outcome(hb: Heartbeat) -> str:
    return hb.status.value + (f", exit code {hb.exit_code}" if hb.exit_code is not None else "")
