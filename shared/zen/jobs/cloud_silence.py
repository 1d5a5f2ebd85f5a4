"""A silent attempt whose VM the cloud took, as the lost-job sweep counts it.

An attempt whose VM is silent past ``heartbeat_timeout_s`` spends one of its job's attempts
(``zen.core.silence.decide_silence``): silence may be the job's doing (its agent killed, its VM wedged). One whose
agent reports PREEMPTED is requeued without spending one (``lifecycle.preempted_by_cloud``). But a spot VM's notice
is 30 s, and its agent's report may go down with it; a flex-start VM is deleted at its run's end, whatever runs on it:
such attempts spent one, and a job of ``max_attempts`` 1 to 3 FAILED after a few preemptions it had no part in.

The sweep asks what the scaling passes saw of the VM (``JobTx.vm_stop_seen``): a pass after the attempt's last
report listed it stopped (neither RUNNING nor STOPPING: GCE bills it no more), or saw it leave its MIG, and Zen did
not delete it (Zen deletes only VMs it drained, and drains none that holds a job). A spot VM so stopped was preempted,
or its guest was shut down, which its agent reports PREEMPTED too when the report gets out: ``FREE_PREEMPTIONS``
bounds both alike. A standard VM so stopped met a host event (a GPU VM cannot live-migrate: GCE terminates it for
host maintenance or a host error, ``on_host_maintenance = "TERMINATE"``, and restarts it under its name), or a hand
stopped or deleted it, or its agent powered it off (a container it could not remove: ``zen.agent.leftover``, as on a
spot VM): a host error leaves its agent no shutdown to report from, and its restarted agent's PREEMPTED
(``zen.agent.restart``) reruns the attempt unspent only when the restart beats the sweep. A flex-start VM so stopped or
gone, its run within ``deadlines.flex_end_margin_s`` of its end by Zen's count at its last report
(``zen.core.provisioning.flex_run_left_s``), reached its run's end. Each attempt is counted as a PREEMPTED report's
is, its history saying why. Only the count and the words change: the STOP sent to the VM (alive but cut off, it must
not run on) and when the attempt ends are the silence's. A VM still RUNNING, and a VM no pass has seen stop yet,
spend an attempt, as any silence does.

A gang's node (``zen.core.gang``) so taken is counted as its agent's PREEMPTED would be, all or nothing kept: the most
silent node of a running gang, its VM taken, is PREEMPTED, not SILENT, the others stopped first (STOPPING) unless all
are silent, and the attempt requeued unspent once they answered or their fence passed (a node that failed beside it
failed for its peer's going: ``gang_ends.settle``). So too a node left unanswered as a gang stops for a node lost or failed,
judged once the gang's fence passed: its silence had ended the attempt as the survivor's failure, never rerun.
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from zen.core import gang, gang_ends
from zen.core.config import ZenConfig
from zen.core.gang_assembly import order
from zen.core.gang_records import ENDED, SILENT, GangNode, most_silent
from zen.core.lifecycle import Change, Decision, preempted_by_cloud
from zen.core.models import AgentStatus, ControlAction, Heartbeat, Job, JobStatus
from zen.core.silence import deadlines_for
from zen.jobs.flex_end import near_run_end
from zen.jobs.store import JobTx


def taken(config: ZenConfig, tx: JobTx, job: Job, decide: Callable[[Job], Decision | None],
          now: datetime) -> Decision | None:
    """The sweep's decision for ``job`` (``decide``) counted as ``preempted_by_cloud`` counts it where the scaling
    passes saw the cloud take the job's VM, a gang's node's (``taken_because``); else the decision as it is."""
    decision = decide(job)
    if gang_ends.is_gang(job):
        return _gang_taken(config, tx, job, decision, decide, now)
    if (decision is None or job.vm is None or job.last_heartbeat_at is None
            or job.status not in (JobStatus.ASSIGNED, JobStatus.RUNNING)
            or not decision.changes or decision.changes[0].to is not JobStatus.LOST):
        return decision
    why = taken_because(config, job, tx.vm_stop_seen(job.vm, job.last_heartbeat_at))
    if why is None:
        return decision
    cloud, said = preempted_by_cloud(job, job.vm, now), f"VM {job.vm} was preempted"
    cloud.changes = [Change(c.to, c.reason.replace(said, f"{decision.changes[0].reason}, and {why}"))
                     for c in cloud.changes]
    cloud.controls = decision.controls  # the silence's STOP: a VM cut off but alive must not run the attempt on
    return cloud


_FLEX = "a scaling pass saw its flex-start VM"


def taken_because(config: ZenConfig, job: Job, seen: tuple[str | None, datetime | None, bool] | None) -> str | None:
    """Why ``job``'s silent VM is the cloud's doing, seen stopped (``seen``: ``JobTx.vm_stop_seen``); None: it is not
    known to be (not seen stopped, or a flex-start VM whose run was not near its end)."""
    cluster = config.cluster(job.cluster)
    if seen is None or cluster is None or job.last_heartbeat_at is None:
        return None
    model, running_at, left = seen
    model = model or cluster.model_of(job.vm or "", job.region or "")
    how = "left its MIG" if left else "stopped"
    if model == "spot":
        return f"a scaling pass saw its spot VM {how} since, not deleted by Zen: taken as preempted"
    if model == "standard":  # (no preemption: the words leave its notice "was requeued", zen.core.notify.verb)
        return (f"a scaling pass saw its standard VM {how} since, not by Zen: a host event (a GPU VM stops for host "
                "maintenance or a host error, and restarts), a hand, or its agent's power-off: taken as the VM's "
                "doing, not the job's")
    if model != "flex-start":
        return None
    if (run_left := near_run_end(config, cluster, job.last_heartbeat_at, None, running_at)) is None:
        return None
    return (f"{_FLEX} {how} since, about {run_left} s of its run left by "
            f"Zen's count when last heard (flex_start_run_s {cluster.flex_start_run_s}): taken as its run's end")


def _gang_taken(config: ZenConfig, tx: JobTx, job: Job, decision: Decision | None,
                decide: Callable[[Job], Decision | None], now: datetime) -> Decision | None:
    """``decision`` (the sweep's for the gang ``job``: ``silence.decide_silence``) where a pass saw the cloud take the VM
    of a node it judged: the running gang's most silent node, or the nodes left unanswered as it stops for a node lost
    or failed, counted as their agents' PREEMPTED would be (this module's docstring)."""
    if decision is None or not job.gang:
        return decision
    if job.status in (JobStatus.ASSIGNED, JobStatus.RUNNING):
        node = most_silent(job.gang)
        why = _node_taken(config, tx, job, node)
        return decision if why is None else _running_node_taken(config, job, decision, node, why, now)
    if not gang_ends.losing_node(job):
        return decision
    taken = {n.vm: why for n in job.gang if n.status not in ENDED and (why := _node_taken(config, tx, job, n))}
    if not taken:
        return decision
    marked = [n.model_copy(update={"status": AgentStatus.PREEMPTED.value, "beat_at": now}) if n.vm in taken else n
              for n in job.gang]  # (taken now: a node stopped at its limit before it still ends the gang FAILED)
    settled = decide(job.model_copy(update={"gang": marked}))
    if settled is None:
        return decision
    said = {(n.rank, n.vm): f"node {n.rank} ({n.vm}) gave no answer, and {taken[n.vm]}"
            for n in job.gang if n.vm in taken}
    settled = _reworded(settled, said)
    # Each taken node is told STOP, as its silence would have told it (the count and the words change, not the orders):
    # one already silent as the gang began to stop was told nothing then, and a pass's sight of its VM is not its word.
    told = {c.vm for c in settled.controls}
    ended = f"the gang ended: {settled.changes[-1].reason}" if settled.changes else "the gang ended"
    settled.controls += [order(job, vm, ControlAction.STOP, ended) for vm in taken if vm not in told]
    return settled


def _running_node_taken(config: ZenConfig, job: Job, decision: Decision, node: GangNode, why: str,
                        now: datetime) -> Decision:
    """A running gang's silent ``node`` whose VM the cloud took (``why``): decided as its PREEMPTED report would be,
    the other nodes stopped first (the attempt ends with their answers); ended now if they are silent too (the
    silence's ``decision`` ended it so), as the silence's orders say (every node told STOP)."""
    all_silent = not decision.changes or decision.changes[0].to is not JobStatus.STOPPING
    nodes = [n.model_copy(update={"status": SILENT}) if all_silent and n.vm != node.vm and n.status not in ENDED else n
             for n in job.gang or ()]
    report = Heartbeat(job_id=job.job_id, attempt=job.attempt, vm=node.vm, region=node.region, zone=node.zone,
                       status=AgentStatus.PREEMPTED, seq=node.seq + 1, sent_at=now)
    cloud = gang.decide_heartbeat(job.model_copy(update={"gang": nodes}), report, now, config.gangs)
    ended = f"reached the end of its flex-start run ({why})" if why.startswith(_FLEX) else None
    if ended and (marked := cloud.fields.get("gang")):  # said so when the gang's end comes (zen.jobs.flex_end)
        cloud.fields["gang"] = [n.model_copy(update={"run_ended": ended}) if n.vm == node.vm else n for n in marked]
    cloud.controls = decision.controls if all_silent else [  # the silent VM told STOP too: it may be cut off, alive
        *cloud.controls, *(c for c in decision.controls if c.vm == node.vm)]
    timeout = deadlines_for(job, config.deadlines).heartbeat_timeout_s  # as the sweep waited
    silence = f"no heartbeat from node {node.rank} ({node.vm}) for {timeout:g}s"
    return _reworded(cloud, {(node.rank, node.vm): f"{silence}, and {why}"})


def _node_taken(config: ZenConfig, tx: JobTx, job: Job, node: GangNode) -> str | None:
    """``taken_because`` for the VM of the gang ``job``'s ``node``, seen stopped after its last report."""
    as_one = job.model_copy(update={"vm": node.vm, "region": node.region, "last_heartbeat_at": node.beat_at})
    return taken_because(config, as_one, tx.vm_stop_seen(node.vm, node.beat_at))


def _reworded(decision: Decision, said: dict[tuple[int, str], str]) -> Decision:
    """``decision`` with each node of ``said`` "was preempted" (as a node, or as a VM: ``zen.core.gang``'s words) said
    so instead."""
    for (rank, vm), why in said.items():  # (rank, VM) of a node
        decision.changes = [Change(c.to, c.reason.replace(f"node {rank} ({vm}) was preempted", why).replace(
            f"VM {vm} was preempted", why)) for c in decision.changes]
    return decision
