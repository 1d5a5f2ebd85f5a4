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
Each node's last report and exit code stay in ``gang``. How a gang's attempt ends as one: ``zen.core.gang_ends``;
when a silent node loses it: ``zen.core.silence``. Why and the limits: docs/how-to/multi-node.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from zen.core import gang_ends, gave_back, lifecycle
from zen.core.gang_assembly import assembly_expired as assembly_expired, keep_deadline as keep_deadline
from zen.core.gang_assembly import claimed_again, claimed_node, confirm as _confirm, order as _order, place as place
from zen.core.gang_assembly import successor
from zen.core.gang_records import GangConfig, GangNode, master_port as master_port, node_wait_s as node_wait_s
from zen.core.gang_records import ROOM_AFTER_CLAIM_S as ROOM_AFTER_CLAIM_S, avoid_region as avoid_region
from zen.core.gang_records import ENDED as ENDED, GAVE_BACK, SILENT, agents_line, fence_timeout_s, first_failure
from zen.core.gang_records import most_silent, room_seen_after as room_seen_after, word_after
from zen.core.lifecycle import Change, Decision
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat, Job, JobStatus, StopRequest
from zen.core.reports import LEFT_RUNNING, gave_up
from zen.core.retries import ended
from zen.core.stops import users_reason

_RUN = (JobStatus.ASSIGNED, JobStatus.RUNNING)


# -- the claim ------------------------------------------------------------------------------------
def decide_heartbeat(job: Job, hb: Heartbeat, now: datetime, config: GangConfig,
                     created: datetime | None = None) -> Decision:
    """``lifecycle.decide_heartbeat`` for any job; a gang's claims and node reports decided here (``created``: when
    the reporting VM was made, its token says: ``gang_assembly.claimed_again``)."""
    if not gang_ends.is_gang(job) or hb.attempt != job.attempt or job.status is JobStatus.PENDING:
        return lifecycle.decide_heartbeat(job, hb, now)
    if job.status.terminal:
        return _after_the_end(job, hb)
    if job.status is JobStatus.QUEUED:
        if hb.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING):  # a node gone before the gang completed
            waited = f"reported {hb.status.value} while it waited"
            left = decide_given_back(job, hb.vm, hb.attempt, hb.seq, now, waited)
            claimed = {n.vm for n in job.gang or ()}
            if left is None and hb.status is AgentStatus.PREEMPTED and hb.vm not in claimed:
                return lifecycle.decide_heartbeat(job, hb, now)  # gone before its claim came: that claim is late
            return left or Decision(duplicate=True)
        checked = lifecycle.decide_heartbeat(job, hb, now)  # the region and tag checks, as for one VM
        if checked.ignored or not checked.changes:
            return checked
        return _claim(job, hb, now, config, created)
    gone = successor(job, hb, created) if job.status in _RUN else None
    if gone and gone[0].status == AgentStatus.CLAIMED.value:
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
    mine = next((node for node in nodes if node.vm == hb.vm), None)
    if mine is not None:  # its VM's, or a successor's
        return claimed_again(job, mine, hb, now, created)
    if nodes and hb.region != nodes[0].region:
        # Its copy was its region's subscription's: the gang's region keeps one per missing node, so none goes out
        reason = f"the gang assembles in {nodes[0].region}; a node in {hb.region} cannot join it"
        return Decision(ignored=reason, controls=[_order(job, hb.vm, ControlAction.RELEASE, reason)])
    node = claimed_node(len(nodes), hb, now)
    nodes.append(node)
    if len(nodes) == job.nodes:
        # Each waiting node claimed again until now (its seq recorded, not its time): heard now.
        nodes = [n.model_copy(update={"beat_at": now, "confirmed_at": now}) for n in nodes]
    if len(nodes) < job.nodes:
        first = min(n.beat_at for n in nodes)  # the earliest claim held (a node replaced: claimed_again claimed now)
        widen_at = first + timedelta(seconds=config.assemble_s)
        return Decision(fields=dict(gang=nodes, start_regions=[hb.region], widen_at=widen_at),
                        note=f"node {node.rank} of {job.nodes} claimed by {hb.vm} in {hb.region}")
    vms = ", ".join(n.vm for n in nodes)
    # Below: the message the last attempt's, not this one's; fence_timeout_s its nodes' longest (zen.core.silence).
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
    if not gang_ends.is_gang(job):
        return lifecycle.decide_given_back(job, vm, attempt, seq, now)
    nodes = job.gang or []
    mine = next((node for node in nodes if node.vm == vm), None)
    if attempt != job.attempt or mine is None or seq <= mine.seq:
        return None
    marked = [n.model_copy(update={"status": GAVE_BACK, "seq": seq}) if n.vm == vm else n for n in nodes]
    if job.status in _RUN and mine.status == AgentStatus.CLAIMED.value:  # unspent
        others = [n for n in nodes if n.vm != vm and n.status not in ENDED]
        if others:  # confirmed: they may run already
            reason = (f"{vm} dropped its claim to a part before the gang completed: the other nodes are stopped "
                      "before it is retried")
            said = gang_ends.told(job, f"{vm} gave its part back", False)
            return gang_ends.stop_first(job, others, reason, said, now, gang=marked)
        return gang_ends.given_back(job, vm)
    if job.status is JobStatus.STOPPING and mine.status == AgentStatus.CLAIMED.value:  # never started: its answer
        decision = Decision(fields=dict(gang=marked), note=f"{vm} gave its part back unstarted while the gang stops")
        # The last to answer ends the attempt, as a STOPPED would.
        gang_ends.when_stopped(decision, job, marked, mine, now)
        return decision
    if job.status is not JobStatus.QUEUED:
        return None
    staying = (n for n in nodes if n.vm != vm)
    left = [node.model_copy(update={"rank": rank, "left_at": now}) for rank, node in enumerate(staying)]
    gone = gave_up(job.left_vms, vm, seq)  # its claims sent before now are late copies (lifecycle's check)
    fields = dict(gang=left or None, left_vms=gone)
    if not left:
        fields.update(start_regions=None, widen_at=None)
    return Decision(fields=fields, publish_start=True,
                    note=f"{vm} left the gang before it was complete ({why}); {len(left)} of {job.nodes} nodes hold a part")


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
    update: dict[str, Any] = dict(seq=seq, status=status)
    if own:  # the node's word: its time (unless it had ended), exit code, limit, last line and why it gave back
        if was.status not in ENDED:
            update["beat_at"] = now
        if hb.exit_code is not None:
            update["exit_code"] = hb.exit_code
        update.update(over_limit=hb.over_limit, left_running=hb.message == LEFT_RUNNING,
                      message=agents_line(hb.message))
        if hb.status is AgentStatus.PREEMPTED:
            update["gave_back_why"] = gave_back.why(hb.vm, hb.message)
    node = node.model_copy(update=update)
    nodes[node.rank] = node
    decision = Decision(fields=dict(gang=nodes))
    losing = gang_ends.losing_node(job)
    # The stop's deadline counts from the stop, but a rerun waits while a node says it runs (it heard no STOP).
    if job.status is not JobStatus.STOPPING:
        decision.fields["last_heartbeat_at"] = most_silent(nodes).beat_at
    elif hb.status is AgentStatus.RUNNING and status == AgentStatus.RUNNING.value and (job.preempted_by or losing):
        decision.fields["last_heartbeat_at"] = now
    # The job's message: rank 0's word (a RUNNING's none: its part runs), not its answer to a STOP for a node lost or
    # failed, nor after the first failure (a peer's error after the first: a tail).
    failed_before = (any(n.status == AgentStatus.FAILED.value for n in job.gang or ())
                     and first_failure(nodes, job.max_runtime_s) is not node)
    said = hb.message is not None or hb.status is AgentStatus.RUNNING
    if said and not failed_before and (hb.status is AgentStatus.FAILED or node.rank == 0 and not losing):
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
        lost: set[str] = set()
        if gang_ends.losing_node(job):
            lost = {n.status for n in nodes} & {AgentStatus.PREEMPTED.value, SILENT, GAVE_BACK}
        if not lost:
            return _order(job, node.vm, ControlAction.STOP, lifecycle.stopping_reason(job))
        spent = GAVE_BACK not in lost and (SILENT in lost or job.preemptions >= lifecycle.FREE_PREEMPTIONS)
        return _order(job, node.vm, ControlAction.STOP, gang_ends.told(job, "a node of the gang was lost", spent))
    return None


def _advance(decision: Decision, job: Job, nodes: list[GangNode], node: GangNode, hb: Heartbeat, now: datetime,
             own: bool) -> None:
    status, who = hb.status, f"node {node.rank} ({node.vm})"
    running = [n for n in nodes if n.status not in ENDED]
    if job.status is JobStatus.STOPPING:
        gang_ends.when_stopped(decision, job, nodes, node, now)
        return
    if not own:  # not the node's last word (``word_after``): one that ended already (a spare claim's PREEMPTED
        return  # after its agent restarted stopped the running gang and reran it), or a word overtaken
    if status is AgentStatus.RUNNING and job.status is JobStatus.ASSIGNED:
        decision.changes.append(Change(JobStatus.RUNNING, f"running on {len(nodes)} nodes, first {who}"))
        decision.fields["started_at"] = now
    elif status is AgentStatus.SUCCEEDED and all(n.status == AgentStatus.SUCCEEDED.value for n in nodes):
        why = f"every node succeeded (exit code 0 x {len(nodes)})"
        gang_ends.end(decision, job, JobStatus.SUCCEEDED, why, 0, now)
    elif status is AgentStatus.FAILED and running:
        # Not FAILED (nor retried) yet: a peer the cloud takes breaks the collectives before its PREEMPTED comes, and a
        # retry never runs beside its nodes (gang_ends.settle).
        how = ended(hb.exit_code, hb.over_limit, job.max_runtime_s, "no exit code", hb.message)
        reason = f"{who} failed: {how}; the other nodes are stopped"
        gang_ends.merge(decision, gang_ends.stop_first(job, running, reason, f"{who} failed", now))
    elif status is AgentStatus.FAILED:
        gang_ends.merge(decision, gang_ends.failed(job, nodes, node, now))
    elif status is AgentStatus.STOPPED:
        gang_ends.end(decision, job, JobStatus.CANCELLED, f"{who} stopped", hb.exit_code, now)
    elif status is AgentStatus.PREEMPTED and running:
        # The cloud took one node (or its agent gave the attempt back: zen.core.gave_back): lost for all, others run it.
        said = gave_back.reason(f"{who} was preempted", {node.vm: node.gave_back_why})
        reason = f"{said}: the other nodes are stopped before the gang is rerun"
        told = gang_ends.told(job, said, job.preemptions >= lifecycle.FREE_PREEMPTIONS)
        gang_ends.merge(decision, gang_ends.stop_first(job, running, reason, told, now))
    elif status is AgentStatus.PREEMPTED:  # the last node running: lost for all, requeued as one
        gang_ends.merge(decision, gang_ends.node_preempted(job, nodes, node, now))


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


def decide_stop(job: Job, stop: StopRequest, now: datetime) -> Decision:
    if gang_ends.losing_node(job):
        # The user's stop wins: the gang ends CANCELLED once its nodes answer, not rerun; they are told again, with
        # the shorter wait (zen.core.silence.stop_left_s).
        reason = users_reason(stop.reason)
        orders = [_order(job, n.vm, ControlAction.STOP, reason) for n in job.gang or () if n.status not in ENDED]
        return Decision(fields={"stop_reason": reason}, controls=orders,
                        note=f"{reason} (while a gang stops for a node lost or failed: it ends CANCELLED)")
    return gang_ends.for_gang(job, lifecycle.decide_stop(job, stop, now))


def decide_preempt(job: Job, reason: str, now: datetime) -> Decision:
    return gang_ends.for_gang(job, lifecycle.decide_preempt(job, reason, now))

