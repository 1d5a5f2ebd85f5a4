"""Multi-node jobs (gangs): the pure decisions that make N VMs start together, find each other and end as one. Nothing
here does I/O; ``zen.jobs`` calls these where ``zen.core.lifecycle`` is called (a job of one node goes through them).

The design: one job row, one attempt number, one start message per missing node. A gang's start goes out ``nodes``
times (``zen.jobs.announce``); each VM that pulls a copy claims it as an ordinary start is claimed (CLAIMED, the copy
kept leased), and its claim is recorded in the row's ``gang`` (``GangNode``) under the row's lock, so two claims never
take one rank and a VM never holds two: rank = claim order (0..N-1). The job stays QUEUED while it assembles, so its
demand stays counted; the first claim narrows the start to that node's region (the gang never spans regions: a claim
from elsewhere is released) and sets the assembly deadline (``widen_at``: first claim + ``gangs.assemble_s``). Nobody
is answered until the last node claims: then the job goes ASSIGNED (its ``vm``/``region``/``zone``: rank 0's) and
every node gets its CONFIRM with its place (``GangPlace``: rank, the nodes' addresses in rank order, MASTER_PORT), so
no node runs the command before all N hold their VM. A gang not complete by the deadline (``assembly_expired``, from
the tick) releases every claimed node (RELEASE: their agents drop the start and are idle again) and is retried as
attempt + 1 (not spent from the budget: no node ran), its N starts published afresh.

One fate: each node reports on its own (its own ``seq``, its ``beat_at``); the job's ``last_heartbeat_at`` is the
oldest node's, so the lost-job sweep sees the first node to go silent. The first node that fails ends the job FAILED
with its exit code, or retries it (a node's command exiting non-zero is the job's outcome, as for one VM) once the
others have stopped (a peer's preemption, said after it, makes it a loss instead; one at its limit is never rerun); a
node silent or preempted loses the attempt for all, rerun once the others stopped (``losing_node``); a stop stops all.
Each node's last report and exit code stay in ``gang``. Why and the limits: docs/how-to/multi-node.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from zen.core import gave_back, lifecycle
from zen.core.gang_assembly import RESET as _RESET, assembly_expired as assembly_expired, keep_deadline as keep_deadline
from zen.core.gang_assembly import claimed_again, claimed_node, confirm as _confirm, order as _order, place as place, successor
from zen.core.gang_records import GangConfig, GangNode, master_port as master_port, node_wait_s as node_wait_s
from zen.core.gang_records import ROOM_AFTER_CLAIM_S as ROOM_AFTER_CLAIM_S, avoid_region as avoid_region, first_failure, word_after
from zen.core.gang_records import ENDED as ENDED, GAVE_BACK, SILENT, agents_line, fence_timeout_s, most_silent, room_seen_after as room_seen_after
from zen.core.lease import Deadlines, attempt_deadlines, silent_for
from zen.core.lifecycle import Change, Decision
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat, Job, JobStatus, StopRequest
from zen.core.reports import LEFT_RUNNING, gave_up
from zen.core.retries import ended, next_retry, rerun_as_taken_back
from zen.core.stops import PREEMPTED, users_reason

_RUN = (JobStatus.ASSIGNED, JobStatus.RUNNING)


def is_gang(job: Job) -> bool:
    return job.nodes > 1


# -- the claim ------------------------------------------------------------------------------------
def decide_heartbeat(job: Job, hb: Heartbeat, now: datetime, config: GangConfig, created: datetime | None = None) -> Decision:
    """``lifecycle.decide_heartbeat`` for any job; a gang's claims and node reports decided here (``created``: when
    the reporting VM was made, its token says: ``gang_assembly.claimed_again``)."""
    if not is_gang(job) or hb.attempt != job.attempt or job.status is JobStatus.PENDING:
        return lifecycle.decide_heartbeat(job, hb, now)
    if job.status.terminal:
        return _after_the_end(job, hb)
    if job.status is JobStatus.QUEUED:
        if hb.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING):  # a node gone before the gang completed
            left = decide_given_back(job, hb.vm, hb.attempt, hb.seq, now, f"reported {hb.status.value} while it waited")
            if left is None and hb.status is AgentStatus.PREEMPTED and hb.vm not in {n.vm for n in job.gang or ()}:
                return lifecycle.decide_heartbeat(job, hb, now)  # gone before its claim came: that claim is late
            return left or Decision(duplicate=True)
        checked = lifecycle.decide_heartbeat(job, hb, now)  # the region and tag checks, as for one VM
        if checked.ignored or not checked.changes:
            return checked
        return _claim(job, hb, now, config, created)
    if job.status in _RUN and (gone := successor(job, hb, created)) and gone[0].status == AgentStatus.CLAIMED.value:
        return _claimed_too_late(job, hb, *gone, now)
    return _node_report(job, hb, now, config)


def _claimed_too_late(job: Job, hb: Heartbeat, node: GangNode, why: str, now: datetime) -> Decision:
    """A claim from the VM its MIG made under the name of a confirmed node that has not started its part: the
    VM that claimed it is gone, and the other nodes were told its address, so the gang cannot run whole. The new
    VM is released (CONFIRMed, it would run the part where no peer meets it, its reports refused), and the part is
    the gone VM's given back (``decide_given_back``): the others stopped first, the gang retried unspent."""
    decision = decide_given_back(job, hb.vm, hb.attempt, max(hb.seq, node.seq + 1), now) or Decision(duplicate=True)
    decision.changes = [Change(change.to, f"{why}: {change.reason}") for change in decision.changes]
    decision.controls.append(_order(job, hb.vm, ControlAction.RELEASE, f"{why}; the gang is retried"))
    return decision


def _claim(job: Job, hb: Heartbeat, now: datetime, config: GangConfig, created: datetime | None) -> Decision:
    nodes = list(job.gang or [])
    if (mine := next((node for node in nodes if node.vm == hb.vm), None)) is not None:  # its VM's, or a successor's
        return claimed_again(job, mine, hb, now, created)
    if nodes and hb.region != nodes[0].region:
        # Its copy was its region's subscription's: the gang's region keeps one per missing node, so none goes out
        reason = f"the gang assembles in {nodes[0].region}; a node in {hb.region} cannot join it"
        return Decision(ignored=reason, controls=[_order(job, hb.vm, ControlAction.RELEASE, reason)])
    node = claimed_node(len(nodes), hb, now)
    nodes.append(node)
    if len(nodes) == job.nodes:  # each waiting node claimed again until now (its seq recorded, not its time): heard now
        nodes = [n.model_copy(update={"beat_at": now, "confirmed_at": now}) for n in nodes]
    if len(nodes) < job.nodes:
        first = min(n.beat_at for n in nodes)  # the earliest claim held (a node replaced: claimed_again claimed now)
        return Decision(fields=dict(gang=nodes, start_regions=[hb.region], widen_at=first + timedelta(
            seconds=config.assemble_s)), note=f"node {node.rank} of {job.nodes} claimed by {hb.vm} in {hb.region}")
    vms = ", ".join(n.vm for n in nodes)  # below: message the last attempt's, not this one's; fence_timeout_s its nodes' longest
    return Decision(changes=[Change(JobStatus.ASSIGNED, f"gang complete: {job.nodes} nodes in {hb.region} ({vms})")],
                    fields=dict(gang=nodes, vm=nodes[0].vm, region=nodes[0].region, zone=nodes[0].zone,
                                last_seq=0, last_heartbeat_at=most_silent(nodes).beat_at, start_regions=None,
                                widen_at=None, start_vms=None, message=None, fence_timeout_s=fence_timeout_s(nodes)),
                    controls=[_confirm(job, nodes, n, config) for n in nodes])


def decide_given_back(job: Job, vm: str, attempt: int, seq: int, now: datetime,
                      why: str = "dropped its claim") -> Decision | None:
    """A VM gave back its part of an assembling gang unanswered (``lifecycle.decide_given_back``): it
    leaves the gang, the ranks after it move up (none is told a rank before the gang is complete; each
    notes when: ``GangNode.left_at``), and a start goes out for its place.

    A gang completed after that node gave up (its claim's last try, a moment before the claim that
    completed it) cannot run whole: the others, confirmed (even RUNNING), are stopped first (STOPPING, as for a
    node lost: a next attempt never runs beside them) and the gang is then retried as attempt + 1, not spent
    (the node never ran; its agent ignores an answer to a claim it gave up)."""
    if not is_gang(job):
        return lifecycle.decide_given_back(job, vm, attempt, seq, now)
    nodes = job.gang or []
    mine = next((node for node in nodes if node.vm == vm), None)
    if attempt != job.attempt or mine is None or seq <= mine.seq:
        return None
    if job.status in (JobStatus.ASSIGNED, JobStatus.RUNNING) and mine.status == AgentStatus.CLAIMED.value:  # unspent
        if others := [n for n in nodes if n.vm != vm and n.status not in ENDED]:  # confirmed: they may run already
            marked = [n.model_copy(update={"status": GAVE_BACK, "seq": seq}) if n.vm == vm else n for n in nodes]
            return _stop_first(job, others, f"{vm} dropped its claim to a part before the gang completed: the other "
                               "nodes are stopped before it is retried", _told(job, f"{vm} gave its part back", False),
                               now, gang=marked)
        return _given_back(job, vm)
    if job.status is JobStatus.STOPPING and mine.status == AgentStatus.CLAIMED.value:  # never started: its answer
        marked = [n.model_copy(update={"status": GAVE_BACK, "seq": seq}) if n.vm == vm else n for n in nodes]
        decision = Decision(fields=dict(gang=marked), note=f"{vm} gave its part back unstarted while the gang stops")
        _when_stopped(decision, job, marked, mine, now)  # the last to answer ends the attempt, as a STOPPED would
        return decision
    if job.status is not JobStatus.QUEUED:
        return None
    left = [node.model_copy(update={"rank": rank, "left_at": now}) for rank, node in enumerate(n for n in nodes if n.vm != vm)]
    gone = gave_up(job.left_vms, vm, seq)  # its claims sent before now are late copies (lifecycle's check)
    return Decision(fields=dict(gang=left or None, left_vms=gone, **({} if left else dict(start_regions=None, widen_at=None))),
                    note=f"{vm} left the gang before it was complete ({why}); {len(left)} of {job.nodes} nodes hold a part",
                    publish_start=True)


# -- the nodes' reports ---------------------------------------------------------------------------
def _node_report(job: Job, hb: Heartbeat, now: datetime, config: GangConfig) -> Decision:
    nodes = list(job.gang or [])
    node = next((n for n in nodes if n.vm == hb.vm), None)
    if node is None:  # not one of the gang's: as a VM that does not hold the attempt
        return lifecycle.decide_heartbeat(job.model_copy(update={"gang": None}), hb, now)
    if hb.seq <= node.seq and not (node.status == AgentStatus.CLAIMED.value and hb.status in lifecycle.OUTCOMES):
        # (a node still CLAIMED had no outcome applied: only claims raised its seq, as a one-node job's while ASSIGNED)
        answer = _answer(job, nodes, node, hb, config)
        return Decision(duplicate=True, controls=[answer] if answer else [])
    status, was = word_after(node.status, hb.status), node
    own = status == hb.status.value  # its word taken: the node's last word then (not a claim overtaken, nor an end's)
    # A claim again by a node past its claim (its restarted agent's) keeps the node's seq: its dead agent's journaled
    # reports come after it, and dropped as seen, a part that succeeded read as silent (lifecycle.decide_heartbeat).
    seq = node.seq if hb.status is AgentStatus.CLAIMED and node.status != AgentStatus.CLAIMED.value else hb.seq
    node = node.model_copy(update=dict(seq=seq, status=status, beat_at=now if own and was.status not in ENDED else
                                       node.beat_at, exit_code=hb.exit_code if own and hb.exit_code is not None else
                                       node.exit_code, over_limit=hb.over_limit if own else node.over_limit,
                                       left_running=hb.message == LEFT_RUNNING if own else node.left_running,
                                       message=agents_line(hb.message) if own else node.message, gave_back_why=gave_back.why(hb.vm,
                                       hb.message) if own and hb.status is AgentStatus.PREEMPTED else node.gave_back_why))
    nodes[node.rank] = node
    decision = Decision(fields=dict(gang=nodes))
    if job.status is not JobStatus.STOPPING:  # the stop deadline counts from the stop, but a rerun waits while a
        decision.fields["last_heartbeat_at"] = most_silent(nodes).beat_at  # node says it runs (it heard no STOP)
    elif hb.status is AgentStatus.RUNNING and status == AgentStatus.RUNNING.value and (job.preempted_by or losing_node(job)):
        decision.fields["last_heartbeat_at"] = now
    # The job's message: rank 0's word (a RUNNING's none: its part runs), not its answer to a STOP for a node lost or failed, nor after the first failure
    failed_before = any(n.status == AgentStatus.FAILED.value for n in job.gang or ()) and first_failure(nodes, job.max_runtime_s) is not node
    said = hb.message is not None or hb.status is AgentStatus.RUNNING  # (a peer's error after the first: a tail)
    if said and not failed_before and (hb.status is AgentStatus.FAILED or node.rank == 0 and not losing_node(job)):
        decision.fields["message"] = hb.message if node.rank == 0 else f"node {node.rank}: {hb.message}"
    if answer := _answer(job, nodes, was, hb, config):
        decision.controls.append(answer)
    _advance(decision, job, nodes, node, hb, now, own)
    return decision


def _answer(job: Job, nodes: list[GangNode], node: GangNode, hb: Heartbeat, config: GangConfig) -> ControlMessage | None:
    """A node claiming again (its CONFIRM lost) is told again: CONFIRM with its place while the gang runs, if
    it has not started its part (``node`` as before this report; one that has is told nothing: its part never
    runs twice), STOP once it is stopping; a node running while the gang stops is told to stop again."""
    if hb.status is AgentStatus.CLAIMED and job.status in (JobStatus.ASSIGNED, JobStatus.RUNNING):
        return _confirm(job, nodes, node, config) if node.status == AgentStatus.CLAIMED.value else None
    if job.status is JobStatus.STOPPING and hb.status in (AgentStatus.CLAIMED, AgentStatus.RUNNING):  # (a rerun: a notice)
        lost = {n.status for n in nodes} & {AgentStatus.PREEMPTED.value, SILENT, GAVE_BACK} if losing_node(job) else set()
        spent = GAVE_BACK not in lost and (SILENT in lost or job.preemptions >= lifecycle.FREE_PREEMPTIONS)
        return _order(job, node.vm, ControlAction.STOP, _told(job, "a node of the gang was lost", spent) if lost else
                      lifecycle.stopping_reason(job))
    return None


def _advance(decision: Decision, job: Job, nodes: list[GangNode], node: GangNode, hb: Heartbeat, now: datetime, own: bool) -> None:
    status, who = hb.status, f"node {node.rank} ({node.vm})"
    if job.status is JobStatus.STOPPING:
        _when_stopped(decision, job, nodes, node, now)
        return
    if not own:  # not the node's last word (``word_after``): one that ended already (a spare claim's PREEMPTED
        return  # after its agent restarted stopped the running gang and reran it), or a word overtaken
    if status is AgentStatus.RUNNING and job.status is JobStatus.ASSIGNED:
        decision.changes.append(Change(JobStatus.RUNNING, f"running on {len(nodes)} nodes, first {who}"))
        decision.fields["started_at"] = now
    elif status is AgentStatus.SUCCEEDED and all(n.status == AgentStatus.SUCCEEDED.value for n in nodes):
        _end(decision, job, JobStatus.SUCCEEDED, f"every node succeeded (exit code 0 x {len(nodes)})", 0, now)
    elif status is AgentStatus.FAILED and (running := [n for n in nodes if n.status not in ENDED]):
        # Not FAILED (nor retried) yet: a peer the cloud takes breaks the collectives before its PREEMPTED comes, and a
        how = ended(hb.exit_code, hb.over_limit, job.max_runtime_s, "no exit code", hb.message)  # retry never runs beside its nodes (_settle)
        _merge(decision, _stop_first(job, running, f"{who} failed: {how}; the other nodes are stopped", f"{who} failed", now))
    elif status is AgentStatus.FAILED:
        _merge(decision, _failed(job, nodes, node, now))
    elif status is AgentStatus.STOPPED:
        _end(decision, job, JobStatus.CANCELLED, f"{who} stopped", hb.exit_code, now)
    elif status is AgentStatus.PREEMPTED and (running := [n for n in nodes if n.status not in ENDED]):
        # The cloud took one node (or its agent gave the attempt back: zen.core.gave_back): lost for all, others run it.
        said = gave_back.reason(f"{who} was preempted", {node.vm: node.gave_back_why})
        _merge(decision, _stop_first(job, running, f"{said}: the other nodes are stopped before the gang is rerun",
                                     _told(job, said, job.preemptions >= lifecycle.FREE_PREEMPTIONS), now))
    elif status is AgentStatus.PREEMPTED:  # the last node running: lost for all, requeued as one
        _merge(decision, _node_preempted(job, nodes, node, now))


def _when_stopped(decision: Decision, job: Job, nodes: list[GangNode], node: GangNode, now: datetime) -> None:
    """A stopping gang whose ``nodes`` (``node``'s answer just in) have all answered: its end, by why it stopped."""
    if not all(n.status in ENDED for n in nodes):
        return
    if all(n.status == AgentStatus.SUCCEEDED.value for n in nodes):  # done before the stop came: as one VM
        _end(decision, job, JobStatus.SUCCEEDED, f"every node succeeded (exit code 0 x {len(nodes)}) as the stop came", 0, now)
    elif job.preempted_by and rerun_as_taken_back(False, next((n.over_limit for n in nodes if n.over_limit), None)):
        now_job = job.model_copy(update={"gang": nodes})  # the nodes that answered get no STOP
        _merge(decision, _for_gang(now_job, lifecycle.back_to_pending(job, f"preempted: {job.preempted_by}")))
    elif losing_node(job) or job.preempted_by:  # the others have stopped (or one was killed at a limit)
        _merge(decision, _settle(job, nodes, node, now))
    else:
        decision.changes.append(Change(JobStatus.CANCELLED, "every node stopped"))
        decision.fields["finished_at"] = now


def _told(job: Job, why: str, spends: bool) -> str:
    """A STOP's reason to a gang's other nodes when one was lost: a preemption's (``ZEN_PREEMPTION_NOTICE``
    appears: time to checkpoint) when the gang runs again, the attempt unspent (``spends`` False) or its budget
    not spent yet; else ``why`` alone (the notice promises a rerun: ``zen.core.stops``)."""
    return f"{PREEMPTED}{why}: the gang runs again" if not spends or job.attempt < job.max_attempts else why


def _stop_first(job: Job, nodes: list[GangNode], reason: str, order: str, now: datetime, **fields: Any) -> Decision:
    """A gang that lost or failed a node while others run: STOPPING (``losing_node``) and STOP to ``nodes``;
    ``_settle`` ends the attempt once they answered or their fence surely ended it: never a rerun beside them."""
    return Decision(changes=[Change(JobStatus.STOPPING, reason)], fields=dict(last_heartbeat_at=now, heard_at=job.last_heartbeat_at, **fields),
                    controls=[_order(job, n.vm, ControlAction.STOP, order) for n in nodes])  # deadline from now


def losing_node(job: Job) -> bool:
    """A gang stopping because one of its nodes was preempted or failed: STOPPING for neither a preemption by
    its queue (``preempted_by``) nor a user's stop (``stop_reason``), the two other ways into STOPPING."""
    return is_gang(job) and job.status is JobStatus.STOPPING and not job.preempted_by and job.stop_reason is None


def _settle(job: Job, nodes: list[GangNode], fallback: GangNode, now: datetime) -> Decision:
    """A gang that lost or failed a node, its others stopped (or past their fence): a node stopped at its limit no later
    than any preemption ends it FAILED, whether a peer its SIGTERM broke reported first or not (``first_failure``);
    else one the cloud took or a silent one loses the attempt (a failure beside it, likely the lost peer's), else the
    first failure ends it. With none, a node that succeeded as the others stopped was the silent one (late): lost."""
    if (back := next((n for n in nodes if n.status == GAVE_BACK), None)) is not None:
        return _given_back(job.model_copy(update={"gang": nodes}), back.vm)
    failed = first_failure(nodes, job.max_runtime_s)  # a node stopped at its limit before a peer its stop broke
    gone = next((n for n in nodes if n.status == AgentStatus.PREEMPTED.value), None)
    if failed is not None and failed.over_limit and (gone is None or failed.beat_at <= gone.beat_at):
        return _failed(job, nodes, failed, now)  # stopped at its limit: a rerun meets it again (never rerun)
    if gone is not None:
        return _node_preempted(job, nodes, gone, now)
    if (quiet := next((n for n in nodes if n.status == SILENT), None) or (next(  # spent, as one silent VM's
            (n for n in nodes if n.status == AgentStatus.SUCCEEDED.value), None) if failed is None else None)):
        lost = lifecycle.lose_attempt(job.model_copy(update={"vm": None}), f"no heartbeat from node {quiet.rank}")
        lost.fields.update({"finished_at": now} if lost.changes[-1].to is JobStatus.FAILED else {})
        return _for_gang(job.model_copy(update={"gang": nodes, "vm": quiet.vm}), lost, skip=quiet.vm)
    return _node_preempted(job, nodes, fallback, now) if failed is None else _failed(job, nodes, failed, now)


def _given_back(job: Job, vm: str) -> Decision:
    """Retried unspent: ``vm`` gave its part back as the gang completed, and no other node runs it now."""
    unspent = job.model_copy(update={"max_attempts": job.max_attempts + 1})
    decision = lifecycle.lose_attempt(unspent, f"{vm} dropped its claim to a part before the gang completed")
    decision.fields["max_attempts"] = unspent.max_attempts
    return _for_gang(job, decision, skip=vm)


def _failed(job: Job, nodes: list[GangNode], failed: GangNode, now: datetime) -> Decision:
    """The attempt's first failure, its other nodes ended: retried (``zen.core.retries``) as for one VM, else FAILED."""
    why = f"node {failed.rank} ({failed.vm}) failed: {ended(failed.exit_code, failed.over_limit, job.max_runtime_s, 'no exit code', failed.message)}"
    if (retry := next_retry(job.request, job.retries, job.attempt, failed, now)) is not None:
        retried = Decision(changes=[Change(JobStatus.PENDING, f"node {failed.rank} ({failed.vm}): {retry.reason}")],
                           fields=retry.fields(job.attempt, job.max_attempts))
        return _for_gang(job.model_copy(update={"gang": nodes}), retried)
    decision = Decision(fields=dict(gang=nodes))
    _end(decision, job, JobStatus.FAILED, why, failed.exit_code, now)
    return decision


def _node_preempted(job: Job, nodes: list[GangNode], node: GangNode, now: datetime) -> Decision:
    """The attempt lost to the cloud's taking ``node`` (or its agent's giving it back), requeued as one; others told STOP."""
    lost = lifecycle.preempted_by_cloud(job, node.vm, now)
    lost.changes = gave_back.reworded(lost.changes, {node.vm: node.gave_back_why})
    return _for_gang(job.model_copy(update={"gang": nodes, "vm": node.vm}), lost, skip=node.vm)


def _end(decision: Decision, job: Job, to: JobStatus, reason: str, exit_code: int | None, now: datetime) -> None:
    """The gang's outcome: every node not ended yet is stopped."""
    if job.started_at is None and "started_at" not in decision.fields:
        decision.fields["started_at"] = now
    decision.changes.append(Change(to, reason))
    decision.fields.update(exit_code=exit_code, finished_at=now)
    nodes = decision.fields["gang"]
    decision.controls += [_order(job, n.vm, ControlAction.STOP, f"the gang ended: {reason}")
                          for n in nodes if n.status not in ENDED]


def _merge(decision: Decision, other: Decision) -> None:
    decision.changes += other.changes
    decision.fields.update(other.fields)
    decision.controls += other.controls
    decision.publish_start = decision.publish_start or other.publish_start


def _after_the_end(job: Job, hb: Heartbeat) -> Decision:
    """A report about a gang that is over: as for one VM (CLAIMED: RELEASE, RUNNING: STOP); a node's end kept."""
    nodes = list(job.gang or [])
    node = next((n for n in nodes if n.vm == hb.vm), None)
    decision = lifecycle.decide_heartbeat(job.model_copy(update={"vm": None}), hb, job.updated_at)
    if node is not None and hb.seq <= node.seq:  # a redelivery, or overtaken by the node's last report
        return Decision(duplicate=True, controls=[c for c in decision.controls if c.action is ControlAction.RELEASE])
    if node is not None and hb.status.value in ENDED and node.status not in ENDED:
        nodes[node.rank] = node.model_copy(update=dict(seq=hb.seq, status=hb.status.value, exit_code=hb.exit_code))
        return Decision(fields=dict(gang=nodes), duplicate=True)
    return decision


# -- what ends or moves a whole gang --------------------------------------------------------------
def _for_gang(job: Job, decision: Decision, skip: str | None = None) -> Decision:
    """A decision made as for one VM (``lifecycle``) applied to the whole gang: an order to the job's VM goes to
    every node not ended (``skip``: one that is gone); a decision that ends the attempt stops every node still
    running (releases every node that claimed, while the gang assembles); a new attempt (or none) assembles afresh."""
    if not is_gang(job):
        return decision
    nodes = [n for n in job.gang or [] if n.vm != skip]
    orders = [c for c in decision.controls if c.vm == job.vm and c.attempt == job.attempt]
    decision.controls = [c for c in decision.controls if c not in orders]
    steps = {change.to for change in decision.changes}
    new_attempt = bool(steps & {JobStatus.QUEUED, JobStatus.PENDING}) or decision.fields.get("attempt", job.attempt) != job.attempt
    over = new_attempt or JobStatus.LOST in steps or any(step.terminal for step in steps)
    reason = decision.changes[-1].reason if decision.changes else "the gang ended"
    if job.status is JobStatus.QUEUED:
        if over:
            decision.controls += [_order(job, n.vm, ControlAction.RELEASE, reason) for n in nodes]
    elif orders:
        decision.controls += [order.model_copy(update={"vm": n.vm}) for order in orders for n in nodes
                              if n.status not in ENDED]
    elif over:
        decision.controls += [_order(job, n.vm, ControlAction.STOP, f"the gang ended: {reason}")
                              for n in nodes if n.status not in ENDED]
    if new_attempt:  # assembled afresh, and its queue's taking back (if any) was the last attempt's
        decision.fields.update(_RESET, preempted_by=None)
    return decision


def decide_stop(job: Job, stop: StopRequest, now: datetime) -> Decision:
    if losing_node(job):  # the user's stop wins: the gang ends CANCELLED once its nodes answer, not rerun; they
        reason = users_reason(stop.reason)  # are told again, with the shorter wait (lifecycle.stop_left_s)
        return Decision(fields={"stop_reason": reason}, note=f"{reason} (while a gang stops for a node lost or failed: it ends CANCELLED)",
                        controls=[_order(job, n.vm, ControlAction.STOP, reason) for n in job.gang or () if n.status not in ENDED])
    return _for_gang(job, lifecycle.decide_stop(job, stop, now))


def decide_preempt(job: Job, reason: str, now: datetime) -> Decision:
    return _for_gang(job, lifecycle.decide_preempt(job, reason, now))


def decide_silence(job: Job, now: datetime, deadlines: Deadlines, heard_since: datetime | None = None,
                   heard_until: datetime | None = None) -> Decision | None:
    """The sweep, for any job; a gang's silence is its most silent node's, named in the reason (``_settle``)."""
    if not is_gang(job) or not job.gang:
        return lifecycle.decide_silence(job, now, deadlines, heard_since, heard_until)
    deadlines = attempt_deadlines(deadlines, job.fence_timeout_s)  # its nodes' longest fence, kept from its completion
    if losing_node(job):  # unanswered: rerun once a node cut off from Zen has surely ended it (its fence)
        quiet_s = silent_for(job.last_heartbeat_at or job.updated_at, now, heard_since, heard_until).total_seconds()
        return _settle(job, list(job.gang), job.gang[0], now) if quiet_s >= deadlines.preempted_stop_s else None
    silent = most_silent(job.gang)
    decision = lifecycle.decide_silence(job.model_copy(update={"vm": silent.vm}), now, deadlines, heard_since, heard_until)
    if decision is None:
        return None
    decision.changes = [Change(c.to, c.reason.replace(silent.vm, f"node {silent.rank} ({silent.vm})", 1)) for c in decision.changes]
    heard = min(now, heard_until or now) - timedelta(seconds=deadlines.heartbeat_timeout_s)  # (others silent: as surely)
    if (others := [n for n in job.gang if n.status not in ENDED and n.vm != silent.vm and max(n.beat_at, heard_since or n.beat_at) > heard]) and job.status in _RUN:
        why = decision.changes[0].reason  # the silent one told STOP too: it may be alive but cut off (charged to now, as one VM)
        silenced = [n.model_copy(update={"status": SILENT, "beat_at": now}) if n == silent else n for n in job.gang]
        return _stop_first(job, [silent, *others], f"{why}: the other nodes are stopped before the rerun", _told(job, why, True), now,
                           gang=silenced)
    return _for_gang(job.model_copy(update={"vm": silent.vm}), decision)
