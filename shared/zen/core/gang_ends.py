"""How a gang's attempt ends or moves as one (``zen.core.gang``'s last part, pure): a decision made as for one VM
applied to every node (``for_gang``); a node lost or failed while others run stops them first (``stop_first``,
``losing_node``), and the attempt is settled once they answered or their fence surely ended it (``settle``,
``when_stopped``): never a rerun beside them. Why: docs/how-to/multi-node.md."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from zen.core import gave_back, lifecycle
from zen.core.gang_assembly import RESET, order
from zen.core.gang_records import ENDED, GAVE_BACK, SILENT, GangNode, first_failure
from zen.core.lifecycle import Change, Decision
from zen.core.models import AgentStatus, ControlAction, Job, JobStatus
from zen.core.retries import ended, next_retry, rerun_as_taken_back
from zen.core.stops import PREEMPTED


def is_gang(job: Job) -> bool:
    return job.nodes > 1


def losing_node(job: Job) -> bool:
    """A gang stopping because one of its nodes was preempted or failed: STOPPING for neither a preemption by
    its queue (``preempted_by``) nor a user's stop (``stop_reason``), the two other ways into STOPPING."""
    return is_gang(job) and job.status is JobStatus.STOPPING and not job.preempted_by and job.stop_reason is None


def told(job: Job, why: str, spends: bool) -> str:
    """A STOP's reason to a gang's other nodes when one was lost: a preemption's (``ZEN_PREEMPTION_NOTICE``
    appears: time to checkpoint) when the gang runs again, the attempt unspent (``spends`` False) or its budget
    not spent yet; else ``why`` alone (the notice promises a rerun: ``zen.core.stops``)."""
    return f"{PREEMPTED}{why}: the gang runs again" if not spends or job.attempt < job.max_attempts else why


def stop_first(job: Job, nodes: list[GangNode], reason: str, said: str, now: datetime, **fields: Any) -> Decision:
    """A gang that lost or failed a node while others run: STOPPING (``losing_node``) and STOP to ``nodes``
    (``said``: the STOP's reason); ``settle`` ends the attempt once they answered or their fence surely ended it:
    never a rerun beside them. The stop's deadline counts from now."""
    return Decision(
        changes=[Change(JobStatus.STOPPING, reason)],
        fields=dict(last_heartbeat_at=now, heard_at=job.last_heartbeat_at, **fields),
        controls=[order(job, n.vm, ControlAction.STOP, said) for n in nodes],
    )


def when_stopped(decision: Decision, job: Job, nodes: list[GangNode], node: GangNode, now: datetime) -> None:
    """A stopping gang whose ``nodes`` (``node``'s answer just in) have all answered: its end, by why it stopped."""
    if not all(n.status in ENDED for n in nodes):
        return
    if all(n.status == AgentStatus.SUCCEEDED.value for n in nodes):  # done before the stop came: as one VM
        why = f"every node succeeded (exit code 0 x {len(nodes)}) as the stop came"
        end(decision, job, JobStatus.SUCCEEDED, why, 0, now)
    elif job.preempted_by and rerun_as_taken_back(False, next((n.over_limit for n in nodes if n.over_limit), None)):
        now_job = job.model_copy(update={"gang": nodes})  # the nodes that answered get no STOP
        merge(decision, for_gang(now_job, lifecycle.back_to_pending(job, f"preempted: {job.preempted_by}")))
    elif losing_node(job) or job.preempted_by:  # the others have stopped (or one was killed at a limit)
        merge(decision, settle(job, nodes, node, now))
    else:
        decision.changes.append(Change(JobStatus.CANCELLED, "every node stopped"))
        decision.fields["finished_at"] = now


def settle(job: Job, nodes: list[GangNode], fallback: GangNode, now: datetime) -> Decision:
    """A gang that lost or failed a node, its others stopped (or past their fence): a node stopped at its limit no later
    than any preemption ends it FAILED, whether a peer its SIGTERM broke reported first or not (``first_failure``);
    else one the cloud took or a silent one loses the attempt (a failure beside it, likely the lost peer's), else the
    first failure ends it. With none, a node that succeeded as the others stopped was the silent one (late): lost."""
    if (back := next((n for n in nodes if n.status == GAVE_BACK), None)) is not None:
        return given_back(job.model_copy(update={"gang": nodes}), back.vm)
    failure = first_failure(nodes, job.max_runtime_s)  # a node stopped at its limit before a peer its stop broke
    gone = next((n for n in nodes if n.status == AgentStatus.PREEMPTED.value), None)
    if failure is not None and failure.over_limit and (gone is None or failure.beat_at <= gone.beat_at):
        return failed(job, nodes, failure, now)  # stopped at its limit: a rerun meets it again (never rerun)
    if gone is not None:
        return node_preempted(job, nodes, gone, now)
    quiet = next((n for n in nodes if n.status == SILENT), None)
    if quiet is None and failure is None:  # spent, as one silent VM's
        quiet = next((n for n in nodes if n.status == AgentStatus.SUCCEEDED.value), None)
    if quiet is not None:
        lost = lifecycle.lose_attempt(job.model_copy(update={"vm": None}), f"no heartbeat from node {quiet.rank}")
        if lost.changes[-1].to is JobStatus.FAILED:
            lost.fields["finished_at"] = now
        return for_gang(job.model_copy(update={"gang": nodes, "vm": quiet.vm}), lost, skip=quiet.vm)
    if failure is None:
        return node_preempted(job, nodes, fallback, now)
    return failed(job, nodes, failure, now)


def given_back(job: Job, vm: str) -> Decision:
    """Retried unspent: ``vm`` gave its part back as the gang completed, and no other node runs it now."""
    unspent = job.model_copy(update={"max_attempts": job.max_attempts + 1})
    decision = lifecycle.lose_attempt(unspent, f"{vm} dropped its claim to a part before the gang completed")
    decision.fields["max_attempts"] = unspent.max_attempts
    return for_gang(job, decision, skip=vm)


def failed(job: Job, nodes: list[GangNode], failure: GangNode, now: datetime) -> Decision:
    """The attempt's first failure, its other nodes ended: retried (``zen.core.retries``) as for one VM, else FAILED."""
    how = ended(failure.exit_code, failure.over_limit, job.max_runtime_s, "no exit code", failure.message)
    why = f"node {failure.rank} ({failure.vm}) failed: {how}"
    if (retry := next_retry(job.request, job.retries, job.attempt, failure, now)) is not None:
        retried = Decision(changes=[Change(JobStatus.PENDING, f"node {failure.rank} ({failure.vm}): {retry.reason}")],
                           fields=retry.fields(job.attempt, job.max_attempts))
        return for_gang(job.model_copy(update={"gang": nodes}), retried)
    decision = Decision(fields=dict(gang=nodes))
    end(decision, job, JobStatus.FAILED, why, failure.exit_code, now)
    return decision


def node_preempted(job: Job, nodes: list[GangNode], node: GangNode, now: datetime) -> Decision:
    """The attempt lost to the cloud's taking ``node`` (or its agent's giving it back), requeued as one; others told STOP."""
    lost = lifecycle.preempted_by_cloud(job, node.vm, now)
    lost.changes = gave_back.reworded(lost.changes, {node.vm: node.gave_back_why})
    return for_gang(job.model_copy(update={"gang": nodes, "vm": node.vm}), lost, skip=node.vm)


def end(decision: Decision, job: Job, to: JobStatus, reason: str, exit_code: int | None, now: datetime) -> None:
    """The gang's outcome: every node not ended yet is stopped."""
    if job.started_at is None and "started_at" not in decision.fields:
        decision.fields["started_at"] = now
    decision.changes.append(Change(to, reason))
    decision.fields.update(exit_code=exit_code, finished_at=now)
    nodes = decision.fields["gang"]
    decision.controls += [order(job, n.vm, ControlAction.STOP, f"the gang ended: {reason}")
                          for n in nodes if n.status not in ENDED]


def merge(decision: Decision, other: Decision) -> None:
    decision.changes += other.changes
    decision.fields.update(other.fields)
    decision.controls += other.controls
    decision.publish_start = decision.publish_start or other.publish_start


def for_gang(job: Job, decision: Decision, skip: str | None = None) -> Decision:
    """A decision made as for one VM (``lifecycle``) applied to the whole gang: an order to the job's VM goes to
    every node not ended (``skip``: one that is gone); a decision that ends the attempt stops every node still
    running (releases every node that claimed, while the gang assembles); a new attempt (or none) assembles afresh."""
    if not is_gang(job):
        return decision
    nodes = [n for n in job.gang or [] if n.vm != skip]
    orders = [c for c in decision.controls if c.vm == job.vm and c.attempt == job.attempt]
    decision.controls = [c for c in decision.controls if c not in orders]
    steps = {change.to for change in decision.changes}
    new_attempt = (bool(steps & {JobStatus.QUEUED, JobStatus.PENDING})
                   or decision.fields.get("attempt", job.attempt) != job.attempt)
    over = new_attempt or JobStatus.LOST in steps or any(step.terminal for step in steps)
    reason = decision.changes[-1].reason if decision.changes else "the gang ended"
    if job.status is JobStatus.QUEUED:
        if over:
            decision.controls += [order(job, n.vm, ControlAction.RELEASE, reason) for n in nodes]
    elif orders:
        decision.controls += [given.model_copy(update={"vm": n.vm}) for given in orders for n in nodes
                              if n.status not in ENDED]
    elif over:
        decision.controls += [order(job, n.vm, ControlAction.STOP, f"the gang ended: {reason}")
                              for n in nodes if n.status not in ENDED]
    if new_attempt:  # assembled afresh, and its queue's taking back (if any) was the last attempt's
        decision.fields.update(RESET, preempted_by=None)
    return decision
