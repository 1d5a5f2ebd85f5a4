"""A lost attempt's final report that comes after the sweep gave the attempt up (``zen.core.lifecycle``'s
one exception to "an older attempt is stale"): a SUCCEEDED or FAILED from the VM that held the attempt,
while no later attempt was claimed, ends the job as that attempt (a FAILED its retries would retry counts
as that retry: the rerun queued already goes ahead); so does a SUCCEEDED of an attempt its queue took back
whose stop went unanswered; and a SUCCEEDED while the rerun is claimed, runs or is being stopped on a VM: the job
ends as the attempt that succeeded, the rerun is told STOP (its usage STOPPED; a job that is over spends no retry), where it
ran to its end, a second outcome over the first, or none at all had it failed; anything else stays stale.

The conditions, what the job and its history then say, and what is not undone:
docs/explanations/delivery-guarantees.md, "a lost attempt's late final report".
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from zen.core.incarnation import claimed_before
from zen.core.lifecycle import Change, Decision
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat, Job, JobStatus
from zen.core.retries import next_retry, rerun_as_taken_back

if TYPE_CHECKING:
    from zen.jobs.store import UsageRows

FINAL = {AgentStatus.SUCCEEDED: JobStatus.SUCCEEDED, AgentStatus.FAILED: JobStatus.FAILED}


def late_final(rows: UsageRows, job: Job, hb: Heartbeat, now: datetime, created: datetime | None = None
               ) -> Decision | None:
    """What ``hb`` does when it is a lost attempt's late final report (above); None when it is not one
    (``lifecycle.decide_heartbeat`` decides). Reads only for a final report of an older attempt of a
    job that waits (or, a SUCCEEDED, whose rerun a VM holds), or of the current attempt of a job that
    FAILED, from that attempt's VM; writes only the attempt's outcome (FAILED) when that report counts as
    a retry. A report from a VM ``created`` after
    the attempt started is refused: its MIG recreated the VM under the name (``zen.core.incarnation``)."""
    if hb.status not in FINAL:
        return None
    waiting = job.status in (JobStatus.QUEUED, JobStatus.PENDING) and hb.attempt < job.attempt
    rerun = (hb.status is AgentStatus.SUCCEEDED and job.status.holds_vm  # (STOPPING too: its stop's end is no outcome)
             and hb.attempt < job.attempt and job.vm is not None)  # its rerun on a VM: stopped (decide_late_final)
    spent = (job.status is JobStatus.FAILED and hb.attempt == job.attempt and hb.vm == job.vm
             and hb.seq > job.last_seq)
    if not (waiting or rerun or spent):
        return None
    lost = rows.lost_attempt(job.job_id, hb.attempt)
    if lost is None or not lost["by_sweep"] or lost["later_held"] or lost["vm"] != hb.vm:
        return None
    if (recreated := claimed_before(hb.vm, hb.attempt, lost["started_at"], created)) is not None:
        return Decision(ignored=recreated)
    if lost["outcome"] == "PREEMPTED" and rerun_as_taken_back(hb.status is AgentStatus.SUCCEEDED, hb.over_limit):
        return None  # its queue took it back: a failure (maybe the stop's own) is rerun as the preemption would
    if waiting and hb.status is AgentStatus.FAILED and (
            retry := next_retry(job.request, job.retries, hb.attempt, hb, now)) is not None:
        # Had it come in time, the failure would have been retried: the rerun queued already is that retry.
        # Its row says FAILED now, in this transaction, so that a redelivery of the report counts nothing more.
        rows.record_late_outcome(job.job_id, hb.attempt, AgentStatus.FAILED.value)
        said = {} if hb.message is None or job.vm is not None else {"message": hb.message}  # (as a retry's: until claimed)
        # As a retry, it spends no attempt: the loss that spent one is given it back; one the sweep took for the cloud's
        # (requeued unspent, a preemption counted) was no preemption: the rerun it gave is the retry's, given once.
        unspent = {"preemptions": job.preemptions - 1} if lost["unspent"] else {"max_attempts": job.max_attempts + 1}
        return Decision(fields={"retries": retry.count, **unspent, **said}, note=(
            f"attempt {hb.attempt}'s final report ({_outcome(hb)}) arrived after it was taken for lost; "
            f"it earns retry {retry.count} of {job.request.get('max_retries')}: attempt {job.attempt}, queued "
            f"already, is that retry"))
    if spent:
        return Decision(ignored=f"attempt {hb.attempt}'s final report ({_outcome(hb)}) arrived after it was "
                                f"taken for lost, which spent the attempt budget: the job stays FAILED "
                                f"(a job that is over is not changed; submit it again to run it)")
    return decide_late_final(job, hb, lost["started_at"], now,  # its usage row: JobService._record_usage
                             "its queue took it back and it did not answer the stop in time"
                             if lost["outcome"] == "PREEMPTED" else "it was taken for lost")


def decide_late_final(job: Job, hb: Heartbeat, started_at: datetime | None, now: datetime,
                      given_up: str = "it was taken for lost") -> Decision:
    """The job ends with the outcome of ``hb``'s attempt, as that attempt (the checks are ``late_final``'s). A hold
    of the job waiting (no region of its may run it now: ``zen.jobs.claims``) is over with it, as a stop's is. A
    rerun a VM holds (ASSIGNED, RUNNING, STOPPING) is told STOP: the job is over, and its user told which attempt's
    it is."""
    later = f"attempt {job.attempt}" if job.attempt == hb.attempt + 1 else f"attempts {hb.attempt + 1}-{job.attempt}"
    controls = []
    if job.status.holds_vm and job.vm is not None:
        ended = f"{later}, its rerun on VM {job.vm}, is stopped: attempt {hb.attempt}'s outcome is the job's"
        controls.append(ControlMessage(vm=job.vm, job_id=job.job_id, attempt=job.attempt, action=ControlAction.STOP,
                                       reason=f"job is already {hb.status.value} (attempt {hb.attempt})"))
    else:
        ended = f"{later} never started"
    reason = f"attempt {hb.attempt}'s final report ({_outcome(hb)}) arrived after {given_up}; {ended}"
    fields = dict(attempt=hb.attempt, vm=hb.vm, region=hb.region, zone=hb.zone, last_seq=hb.seq,
                  last_heartbeat_at=now, started_at=started_at, finished_at=now, exit_code=hb.exit_code,
                  hold=None, hold_until=None, preempted_by=None)  # (a rerun its queue was taking back: over)
    if hb.message is not None:
        fields["message"] = hb.message
    return Decision(changes=[Change(FINAL[hb.status], reason)], fields=fields, controls=controls)


def _outcome(hb: Heartbeat) -> str:
    return hb.status.value + (f", exit code {hb.exit_code}" if hb.exit_code is not None else "")
