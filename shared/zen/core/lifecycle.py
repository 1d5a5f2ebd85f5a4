"""Pure decisions of the job state machine: given a job and a message, what changes (a ``Decision``).

Nothing here does I/O: ``JobService._apply`` (``zen.jobs.service``) carries a ``Decision`` out in one
transaction. The transitions are ``zen.core.job_states.TRANSITIONS``. The rules that make Pub/Sub's
at-least-once, any-order delivery safe (stale attempts, ``seq``, the claim race, what is retried, a
lost attempt's late final report): docs/explanations/delivery-guarantees.md. What a silent VM's attempt
comes to (the lost-job sweep): ``zen.core.silence``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from zen.core import gave_back
from zen.core.retries import budget_spent, ended, next_retry, rerun_as_taken_back, retries_spent
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat, Job, JobStatus, StopRequest
from zen.core.reports import gave_up, refused_floor
from zen.core.stops import PREEMPTED, users_reason


@dataclass(frozen=True)
class Change:
    """One status change, in the order it happens."""
    to: JobStatus
    reason: str


@dataclass
class Decision:
    """What a message does to a job. Empty means "nothing" (see ``ignored`` for why)."""
    changes: list[Change] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)
    controls: list[ControlMessage] = field(default_factory=list)
    publish_start: bool = False  # publish a StartMessage for the (new) current attempt
    start_copies: int | None = None  # a gang's: this many copies of it, not one per node not claimed (None)
    ignored: str | None = None  # reported to users: the message changed nothing, and why
    duplicate: bool = False  # a plain redelivery: changes nothing, reported only in logs
    note: str | None = None  # a history row that changes no status (a start widened: zen.core.routing)
    refused: str | None = None  # a claim refused for this cause (zen.jobs.claims): told the VM, a repeat's key
    ended_at: datetime | None = None  # the attempt it ends ended then, before now (zen.core.report_end): billed to it

    @property
    def changes_job(self) -> bool:
        return bool(self.changes or self.fields)


def _control(job: Job, hb_or_vm: Heartbeat | str | None, action: ControlAction, reason: str,
             attempt: int | None = None) -> ControlMessage:
    vm, its = (hb_or_vm.vm, hb_or_vm.attempt) if isinstance(hb_or_vm, Heartbeat) else (hb_or_vm, job.attempt)
    assert vm is not None, "a job that holds a VM names it (set with ASSIGNED, by the claim)"
    return ControlMessage(vm=vm, job_id=job.job_id, attempt=its if attempt is None else attempt, action=action,
                          reason=reason)


FREE_PREEMPTIONS = 10  # preemptions of a job (its VM's or a queue's) that spend no attempt (``_advance``)
UNSPENT = "no attempt spent"  # said by a loss requeued unspent (``preempted_by_cloud``): zen.store.usage.lost_attempt


def refusal(job: Job, hb: Heartbeat, reason: str) -> ControlMessage:
    """The order to a VM whose report about ``job`` is refused: RELEASE a claim (drop the start), STOP one it runs."""
    action = ControlAction.RELEASE if hb.status is AgentStatus.CLAIMED else ControlAction.STOP
    return _control(job, hb, action, reason)


def lose_attempt(job: Job, reason: str) -> Decision:
    """The current attempt is lost: requeue with attempt + 1, or FAILED once the budget is spent."""
    decision = Decision(changes=[Change(JobStatus.LOST, reason)])
    if job.vm:  # the VM may be alive but cut off: it must not go on running a given-up attempt
        decision.controls.append(_control(job, job.vm, ControlAction.STOP, f"attempt {job.attempt} was lost"))
    if job.attempt >= job.max_attempts:
        spent = budget_spent(job, FREE_PREEMPTIONS)
        decision.changes.append(Change(JobStatus.FAILED, f"{spent}; the last: {reason}"))  # what a person may act on
        return decision
    decision.changes.append(Change(JobStatus.QUEUED, f"requeued as attempt {job.attempt + 1}"))
    decision.fields.update(attempt=job.attempt + 1, vm=None, region=None, zone=None, last_seq=0,
                           last_heartbeat_at=None, started_at=None, exit_code=None, preempted_by=None, heard_at=None)
    decision.publish_start = True
    return decision


def decide_given_back(job: Job, vm: str, attempt: int, seq: int, now: datetime) -> Decision | None:
    """A VM heartbeat (``seq``) says ``vm`` gave back the start of the job's ``attempt`` with its claim
    unanswered (``VmHeartbeat.given_back``): the attempt never ran there. None when that changes nothing.

    ASSIGNED to that VM for that attempt: back to QUEUED as the same attempt, its start published again, nothing
    spent, no ``heartbeat_timeout_s`` waited; STOPPING (stopped before the VM gave it back): the stop needs no
    answer, ended as for a QUEUED job. Only if no report of it from the VM is later than the heartbeat
    (``last_seq``): a later one is a claim the VM made again after it read the list, answered on its own (one
    sent before it is a late copy: ``left_vms``). A RUNNING job is left to the sweep: the VM's reports say it ran."""
    if job.vm != vm or job.attempt != attempt or seq <= job.last_seq:
        return None
    never = (f"{vm} dropped its claim (VM heartbeat {seq}, its last report {job.last_seq}); "
             f"attempt {job.attempt} never ran")
    if job.status is JobStatus.STOPPING:
        if job.preempted_by:
            return back_to_pending(job, f"preempted: {job.preempted_by}; {never}")
        stopped = f"{job.stop_reason or 'stop requested'}; {never}"
        return Decision(changes=[Change(JobStatus.CANCELLED, stopped)], fields={"finished_at": now})
    if job.status is not JobStatus.ASSIGNED:
        return None
    return Decision(  # last_seq 0: the next claim may come from a VM whose clock is behind this one's
        changes=[Change(JobStatus.QUEUED, f"{never}: requeued")],
        fields=dict(vm=None, region=None, zone=None, last_seq=0, last_heartbeat_at=None,
                    left_vms=gave_up(job.left_vms, vm, seq)),
        publish_start=True)


def decide_preempt(job: Job, reason: str, now: datetime) -> Decision:
    """Admission takes the job's quota back (``zen.jobs.queueing``): it goes back to PENDING for a new
    attempt that does not count against its budget. A job on a VM is stopped first (the agent's
    SIGTERM and grace: time to checkpoint) and goes back when the VM answers or goes silent."""
    if job.status is JobStatus.QUEUED:
        return back_to_pending(job, f"preempted: {reason}")
    return Decision(
        changes=[Change(JobStatus.STOPPING, f"preempted: {reason}")],
        fields={"last_heartbeat_at": now, "heard_at": job.last_heartbeat_at, "preempted_by": reason},
        controls=[_control(job, job.vm, ControlAction.STOP, f"{PREEMPTED}{reason}")],
    )


def back_to_pending(job: Job, reason: str) -> Decision:
    """A preempted attempt is over: PENDING as attempt + 1, the budget raised by one (not spent)."""
    return Decision(changes=[Change(JobStatus.PENDING, reason)], fields=dict(
        attempt=job.attempt + 1, max_attempts=job.max_attempts + 1, vm=None, region=None, zone=None, last_seq=0,
        last_heartbeat_at=None, started_at=None, exit_code=None, preempted_by=None, preemptions=job.preemptions + 1,
        heard_at=None))


def decide_heartbeat(job: Job, hb: Heartbeat, now: datetime) -> Decision:
    """Apply an agent's report about ``(job, attempt)``."""
    if hb.attempt > job.attempt and not job.status.terminal:  # over: a late final ended it (zen.jobs.late_final)
        return Decision(ignored=f"heartbeat for attempt {hb.attempt}, but the job is at attempt {job.attempt}")
    if hb.attempt < job.attempt:
        return _stale_attempt(job, hb)
    if job.status.terminal:
        return _after_the_end(job, hb)
    if job.status is JobStatus.PENDING:
        # A claim's seq is a floor: the VM drops its copy; a job held at a refused claim keeps its attempt, and this
        # claim delivered again once the tick lets it go is a late one (claims.held_uncleared).
        floor = refused_floor(job.left_vms, hb.vm, hb.seq) if hb.status is AgentStatus.CLAIMED else {}
        return Decision(ignored="job is not admitted yet", fields=dict(floor),
                        controls=[_control(job, hb, ControlAction.RELEASE, "not admitted")])

    decision = Decision()
    if job.status is JobStatus.QUEUED:
        if hb.seq <= (job.left_vms or {}).get(hb.vm, -1):  # sent before its VM gave the attempt up: a late copy
            return Decision(ignored=f"{hb.vm} gave attempt {job.attempt} up after this report (a copy delivered late)")
        if hb.status is AgentStatus.PREEMPTED:  # its VM went away as it claimed: no CONFIRM came, nothing ran
            note = f"{hb.vm} gave its claim up unanswered (its VM went away); the attempt never ran there"
            return Decision(fields=dict(left_vms=gave_up(job.left_vms, hb.vm, hb.seq)), note=note)
        if hb.region not in job.regions:
            # This VM should never have seen the start message (its subscription filters by region);
            # tell it to drop its copy, and publish a fresh one so the job cannot be stranded.
            decision.controls.append(refusal(job, hb, f"region {hb.region} is not allowed for this job"))
            decision.ignored = f"VM {hb.vm} in region {hb.region} is outside the job's regions {job.regions}"
            decision.publish_start = True
            return decision
        missing = sorted(set(job.request.get("requires_tags") or ()) - set(hb.tags or ()))
        if missing:
            # Enforced again at the claim: a misrouted start message cannot run the job elsewhere.
            decision.controls.append(refusal(job, hb, f"this VM lacks the job's tags {missing}"))
            decision.ignored = f"VM {hb.vm} lacks the tags {missing} the job requires"
            decision.publish_start = True
            return decision
        # First report of this attempt wins the claim, whatever its status: a later report from the
        # same VM can overtake its CLAIMED in Pub/Sub, and must not be lost.
        decision.changes.append(Change(JobStatus.ASSIGNED, f"claimed by {hb.vm}"))
        # An earlier attempt's message (its last lines, a retry's failure, LEFT_RUNNING: zen.store.fleet.held_vms) is
        # not this one's: shown while the job waits to run again, gone once another attempt is claimed. Its fence's
        # timeout is kept with the attempt (zen.core.silence).
        decision.fields.update(vm=hb.vm, region=hb.region, zone=hb.zone, message=None,
                               fence_timeout_s=hb.heartbeat_timeout_s)
        if hb.status in (AgentStatus.CLAIMED, AgentStatus.RUNNING):
            decision.controls.append(_control(job, hb, ControlAction.CONFIRM, "claim won"))
        current = JobStatus.ASSIGNED
    elif job.vm != hb.vm:
        if hb.status is AgentStatus.CLAIMED:
            # An ordinary race (each copy of a start is claimed by someone): no rejection record or event; the loser
            # drops its copy, so this claim delivered again once the attempt is requeued is a late one.
            decision.controls.append(_control(job, hb, ControlAction.RELEASE, f"claimed by {job.vm}"))
            decision.fields.update(refused_floor(job.left_vms, hb.vm, hb.seq))
            decision.duplicate = True
        elif hb.status is AgentStatus.RUNNING:
            decision.controls.append(_control(job, hb, ControlAction.STOP, f"attempt is held by {job.vm}"))
            decision.ignored = f"{hb.vm} reports attempt {job.attempt} that is held by {job.vm}"
        else:
            decision.ignored = f"{hb.vm} reports {hb.status.value} for an attempt held by {job.vm}"
        return decision
    else:
        current = job.status
        if hb.seq <= job.last_seq and not (current is JobStatus.ASSIGNED and hb.status in OUTCOMES):
            return _seen_already(job, hb)  # assigned, no outcome was applied: only claims raised the floor since

    decision.fields.update(last_heartbeat_at=now)
    if hb.status is not AgentStatus.CLAIMED or current is JobStatus.ASSIGNED:
        # Running or stopping, a claim again by the VM holding the attempt (its restarted agent's, of a copy of the
        # start) is no report of the attempt: it must not raise the floor past the reports its dead agent journaled,
        # which the new one sends after it (Pub/Sub keeps no order); dropped as seen, a SUCCEEDED was lost and the job
        # ran again. Assigned, it does: a VM heartbeat sent before it no longer gives the claim back (decide_given_back).
        decision.fields["last_seq"] = max(job.last_seq, hb.seq)
    if hb.message is not None or hb.status is AgentStatus.RUNNING:  # a RUNNING's says what the attempt does now:
        decision.fields["message"] = hb.message  # none once its command runs (not its secrets' read, staging, pull)
    if current is JobStatus.STOPPING or current is JobStatus.RUNNING and hb.status is AgentStatus.CLAIMED:
        # The stop's deadline counts from the stop, whatever the VM reports (it is told again); a running attempt's
        # holder claiming it is its restarted agent, whose run ended with it. A rerun (its queue's preemption)
        # waits while the VM says it runs: that VM has not heard the STOP (an order lost, not its reports).
        decision.fields["heard_at"] = now  # the VM was heard: an unanswered stop is billed from here (zen.core.silence)
        if not (job.preempted_by and current is JobStatus.STOPPING and hb.status is AgentStatus.RUNNING):
            decision.fields.pop("last_heartbeat_at")
        if hb.status is AgentStatus.RUNNING:
            decision.controls.append(_control(job, hb, ControlAction.STOP, stopping_reason(job)))
    _advance(decision, current, job, hb, now)
    return decision


OUTCOMES = (AgentStatus.SUCCEEDED, AgentStatus.FAILED)  # a run's (not a claim's PREEMPTED, nor a stop's STOPPED)


def _seen_already(job: Job, hb: Heartbeat) -> Decision:
    """A report from the VM holding the attempt at or below the last applied ``seq`` changes nothing. A
    CLAIMED is still answered as a fresh one is (``_answer_to_holder``): besides a redelivery, it may be the
    holder claiming again after our answer came too late (an older agent's ``seq`` starts again at 1 for each
    claim: unanswered, it would give the start back forever). Answering a redelivery again is harmless."""
    answer = _answer_to_holder(job, hb, job.status)
    return Decision(duplicate=True, controls=[answer] if answer else [])


def _answer_to_holder(job: Job, hb: Heartbeat, current: JobStatus) -> ControlMessage | None:
    """What a CLAIMED from the VM holding the attempt is told, new or seen before (it may have missed
    our answer): CONFIRM while ASSIGNED, STOP while STOPPING, nothing once RUNNING."""
    if hb.status is not AgentStatus.CLAIMED:
        return None
    if current is JobStatus.ASSIGNED:
        return _control(job, hb, ControlAction.CONFIRM, "claim won")
    if current is JobStatus.STOPPING:
        return _control(job, hb, ControlAction.STOP, stopping_reason(job))
    return None


def stopping_reason(job: Job) -> str:
    """What a STOPPING job's VM is told again: the preemption's reason or the user's (kept by ``decide_stop``)."""
    return f"{PREEMPTED}{job.preempted_by}" if job.preempted_by else job.stop_reason or "stop requested"


def _advance(decision: Decision, current: JobStatus, job: Job, hb: Heartbeat, now: datetime) -> None:
    """Move a job held by ``hb.vm`` forward according to the agent's status."""
    # When the agent says it happened, held between Zen's own times: a run began after Zen heard its claim (now: this
    # report's), an agent whose clock is behind moving a start before neither it nor its VM's creation (incarnation).
    claimed = {JobStatus.QUEUED: now, JobStatus.ASSIGNED: job.last_heartbeat_at}.get(job.status) or job.submitted_at
    sent_at = max(claimed, min(hb.sent_at, now))
    status = hb.status
    if status is AgentStatus.CLAIMED:
        answer = None if decision.changes else _answer_to_holder(job, hb, current)  # a new claim: answered
        if answer:
            decision.controls.append(answer)
        return
    if status is AgentStatus.RUNNING:
        if current is JobStatus.ASSIGNED:
            decision.changes.append(Change(JobStatus.RUNNING, f"running on {hb.vm}"))
            decision.fields["started_at"] = sent_at
        return
    if current is JobStatus.STOPPING and job.preempted_by and rerun_as_taken_back(
            status is AgentStatus.SUCCEEDED, hb.over_limit):  # as a gang's
        pending = back_to_pending(job, f"preempted: {job.preempted_by}")
        decision.changes.extend(pending.changes)
        decision.fields.update(pending.fields)
        return
    retry = None
    if status is AgentStatus.FAILED and current is not JobStatus.STOPPING:
        retry = next_retry(job.request, job.retries, job.attempt, hb, now)
    if retry is not None:
        decision.changes.append(Change(JobStatus.PENDING, retry.reason))  # its backoff's hold: Sweeps.retry_due
        decision.fields.update(retry.fields(job.attempt, job.max_attempts))
        return
    if status in (AgentStatus.SUCCEEDED, AgentStatus.FAILED):
        target = JobStatus.SUCCEEDED if status is AgentStatus.SUCCEEDED else JobStatus.FAILED
        reason = ended(hb.exit_code, hb.over_limit, job.max_runtime_s, status.value.lower(), hb.message)
        if status is AgentStatus.FAILED and (spent := retries_spent(job.request, job.retries, hb)) is not None:
            reason = f"{reason}; {spent}"
        if job.started_at is None and "started_at" not in decision.fields:
            decision.fields["started_at"] = sent_at
        decision.changes.append(Change(target, reason))
        decision.fields.update(exit_code=hb.exit_code, finished_at=now)
        return
    if status is AgentStatus.STOPPED:
        decision.changes.append(Change(JobStatus.CANCELLED, "stopped on request"))
        decision.fields.update(exit_code=hb.exit_code, finished_at=now)
        return
    if status is AgentStatus.PREEMPTED:
        if current is JobStatus.STOPPING:
            decision.changes.append(Change(JobStatus.CANCELLED, "VM went away while stopping"))
            decision.fields["finished_at"] = now
            return
        lost = preempted_by_cloud(job, hb.vm, now)  # or not: zen.core.gave_back
        decision.fields.update(lost.fields)
        decision.changes = decision.changes + gave_back.named(lost.changes, hb.vm, hb.message)
        decision.publish_start = lost.publish_start


def preempted_by_cloud(job: Job, vm: str, now: datetime) -> Decision:
    """``vm`` is going away (spot preemption, maintenance, a flex-start run's end, so worded by ``zen.jobs.flex_end``):
    the cloud's doing, so the attempt is requeued unspent (silence, maybe the job's, spends one unless a pass saw the
    cloud take its VM: ``zen.jobs.cloud_silence``), FREE_PREEMPTIONS times: a job shutting its VM down must not loop."""
    free = job.preemptions < FREE_PREEMPTIONS
    spent = f" ({UNSPENT})" if free else f" ({FREE_PREEMPTIONS} preemptions were free)"
    unspent = job.model_copy(update={"vm": None, "max_attempts": job.max_attempts + free})
    lost = lose_attempt(unspent, f"VM {vm} was preempted{spent}")
    lost.fields.update(max_attempts=job.max_attempts + free, preemptions=job.preemptions + 1)
    if lost.changes[-1].to is JobStatus.FAILED:
        lost.fields["finished_at"] = now
    return lost


_TARGET = {
    AgentStatus.CLAIMED: JobStatus.ASSIGNED, AgentStatus.RUNNING: JobStatus.RUNNING,
    AgentStatus.SUCCEEDED: JobStatus.SUCCEEDED, AgentStatus.FAILED: JobStatus.FAILED,
    AgentStatus.STOPPED: JobStatus.CANCELLED, AgentStatus.PREEMPTED: JobStatus.LOST,
}
_LATE = {JobStatus.CANCELLED: ("STOPPED", "PREEMPTED"), JobStatus.LOST: ("PREEMPTED",)}  # a final word agreeing


def _after_the_end(job: Job, hb: Heartbeat) -> Decision:
    """A report about the current attempt of a job that is already over: terminal states absorb. A CLAIMED is
    told RELEASE whatever its ``seq``: the VM that ran the attempt may pull another copy of its start (a
    redelivery, the narrowed and the widened copy, a republish), and an agent whose ``seq`` starts again at 1
    for each claim (an older one) would otherwise wait for an answer, give the copy back, and get it again."""
    if hb.vm == job.vm and hb.seq > job.last_seq and hb.status.value in _LATE.get(job.status, ()):
        # The VM's late word agreeing with the end (after the sweep cancelled a stop it left unanswered): kept, as a
        # gang node's is. (It was refused, "CANCELLED -> CANCELLED is not allowed", and PREEMPTED "-> LOST".)
        return Decision(fields=dict(exit_code=hb.exit_code, message=hb.message or job.message), duplicate=True)
    if (hb.vm == job.vm and hb.seq <= job.last_seq) or hb.status is AgentStatus.CLAIMED:
        # A redelivery or a report overtaken by the final one; or a copy of the start claimed after the end, an
        # ordinary race (no rejection row or user event): a claim still gets its answer.
        decision = Decision(duplicate=True)
        if hb.status is AgentStatus.CLAIMED:
            decision.controls.append(_control(job, hb, ControlAction.RELEASE, f"job is already {job.status.value}"))
        return decision
    decision = Decision(ignored=f"transition {job.status.value} -> {_TARGET[hb.status].value} is not allowed "
                                f"({hb.status.value} from {hb.vm}; the job is over)")
    if hb.status is AgentStatus.RUNNING:
        # Someone still runs an attempt that is over (e.g. cancelled after a silent stop): stop it.
        decision.controls.append(_control(job, hb, ControlAction.STOP, f"job is already {job.status.value}"))
    return decision


def _stale_attempt(job: Job, hb: Heartbeat) -> Decision:
    stale = f"stale attempt {hb.attempt}: the job is at attempt {job.attempt}"
    decision = Decision(ignored=stale)
    if hb.status is AgentStatus.CLAIMED:
        decision.controls.append(_control(job, hb, ControlAction.RELEASE, stale))
    elif hb.status is AgentStatus.RUNNING:
        decision.controls.append(_control(job, hb, ControlAction.STOP, stale))
    else:
        # A late report of an attempt given up (zen.jobs.late_final).
        decision.duplicate = True
        decision.ignored = None
    return decision


def decide_stop(job: Job, stop: StopRequest, now: datetime) -> Decision:
    """A user asks to stop the job (its reason never reads as a preemption's: ``zen.core.stops``)."""
    reason = users_reason(stop.reason)
    if job.status.terminal:  # the stop that ended it, delivered again (its reason kept on the row): a duplicate
        if job.stop_reason == reason:
            return Decision(duplicate=True)
        return Decision(ignored=f"job is already {job.status.value}")
    if job.status is JobStatus.STOPPING:
        # Stopped for a preemption: the user's stop wins, the job ends CANCELLED instead of waiting; its VM is told
        # again, with the shorter wait (zen.core.silence.stop_left_s): the preemption's STOP gave it longer.
        if job.preempted_by:
            return Decision(fields={"preempted_by": None, "stop_reason": reason},
                            controls=[_control(job, job.vm, ControlAction.STOP, reason)],
                            note=f"{reason} (during a preemption: it ends CANCELLED)")
        return Decision(duplicate=True)
    if job.status in (JobStatus.PENDING, JobStatus.QUEUED):  # over: no hold of it is due any more
        return Decision(changes=[Change(JobStatus.CANCELLED, reason)],
                        fields=dict(finished_at=now, stop_reason=reason, hold=None, hold_until=None))
    # ASSIGNED or RUNNING: the VM must stop it; STOPPING until it answers (or goes silent). Its deadline from now.
    return Decision(
        changes=[Change(JobStatus.STOPPING, reason)],
        fields={"last_heartbeat_at": now, "heard_at": job.last_heartbeat_at, "stop_reason": reason,
                "preempted_by": None},
        controls=[_control(job, job.vm, ControlAction.STOP, reason)],
    )

