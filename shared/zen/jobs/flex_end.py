"""The end of a flex-start VM's run, as a job's history tells it.

GCE deletes a flex-start VM ``flex_start_run_s`` after it is RUNNING, whatever it runs; its agent, shut down, reports
its attempts PREEMPTED, and Zen reruns them free, as a spot VM's preemption (``zen.core.lifecycle.preempted_by_cloud``).
The attempt's end said "VM ... was preempted": untrue of a flex-start VM, which no one preempts, and its user took
the job for one run on a spot VM. A PREEMPTED from a flex-start VM with less than ``deadlines.flex_end_margin_s``
of its run left by Zen's count (``zen.core.provisioning.flex_run_left_s``: counted from when a scaling pass first
saw it RUNNING, a pass's interval late at most, or from its agent's first word less the boot estimate; of a VM a
pass saw stop or go, from the start of the run that ended: ``run_marks``) says it
reached the end of its run instead; one from a flex-start VM with more left still reads as preempted. The VM's model
is the one a scaling pass recorded for it, else the one its name tells (as a claim reads it: ``zen.jobs.claims``): the
primary MIG keeps its name when the cluster's models are reordered or narrowed, and its VMs booted before keep theirs.
A pass that saw the VM stop after the attempt began on it (its report read late) saw that VM's end: its model is still
the one recorded (the claim check reads the name then: the MIG's recreation of it boots from its template now).
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from zen.core import gave_back
from zen.core.config import ClusterConfig, ZenConfig
from zen.core.lifecycle import Change, Decision
from zen.core.models import AgentStatus, Heartbeat, Job
from zen.core.provisioning import flex_run_left_s
from zen.jobs.store import JobStore

# The VM's recorded model (JobTx.vm_model), its first word and first seen RUNNING (JobTx.vm_run_marks).
Marks = tuple[str | None, datetime | None, datetime | None]


def run_marks(store: JobStore, hb: Heartbeat) -> Marks | None:
    """The recorded model and run marks of the VM reporting ``hb`` when it reports an attempt PREEMPTED; None for any
    other report (read before the report's transaction: each is written once, and only this report needs them). The
    model is the one recorded also where a pass saw the VM stop after the attempt began on it (``ran_from``): that VM
    ran it, and its run's end is this report's (the claim check's model is its MIG's recreation's: ``JobTx.vm_model``).
    So is its run's start, where that pass no longer counts it (``JobTx.vm_stop_seen``, as ``zen.jobs.cloud_silence``
    reads it): a VM seen gone has its rows forgotten, its first word with them, and a report read after that (sent
    late, or redelivered) found nothing to count from, and its flex-start run's end read as a preemption."""
    if hb.status is not AgentStatus.PREEMPTED:
        return None
    with store.session() as tx:
        since = ran_from(tx.get_job(hb.job_id), hb)
        model, (first_heard, running_at) = tx.vm_model(hb.vm, since), tx.vm_run_marks(hb.vm)
        if running_at is None and since is not None and (seen := tx.vm_stop_seen(hb.vm, since)) is not None:
            model, running_at = model or seen[0], seen[1]  # the run that ended: seen stopped, or gone (its lifetime)
        return model, first_heard, running_at


def ran_from(job: Job | None, hb: Heartbeat) -> datetime | None:
    """When ``hb``'s attempt began on ``hb.vm``: its claim answered (a gang's node's claim), else its run; None:
    another attempt's, or not known."""
    if job is None or job.attempt != hb.attempt:
        return None
    node = next((n for n in job.gang or () if n.vm == hb.vm), None)
    if node is not None:
        return node.claimed_at
    return job.started_at or job.last_heartbeat_at if job.vm == hb.vm else None


def run_ended(config: ZenConfig, job: Job, hb: Heartbeat, marks: Marks | None, now: datetime) -> str | None:
    """What to say of ``hb.vm`` instead of "was preempted": it is a flex-start VM of the job's cluster whose run has
    less than ``deadlines.flex_end_margin_s`` left ``now`` (``marks``: ``run_marks``, whose recorded model comes
    before the one the VM's name tells); None for any other VM."""
    cluster = config.cluster(job.cluster)
    if marks is None or cluster is None or (marks[0] or cluster.model_of(hb.vm, hb.region)) != "flex-start":
        return None
    if (left := near_run_end(config, cluster, now, *marks[1:])) is None:
        return None
    return (f"reached the end of its flex-start run (flex_start_run_s {cluster.flex_start_run_s}, about "
            f"{left} s left by Zen's count)")


def near_run_end(config: ZenConfig, cluster: ClusterConfig, at: datetime, first_heard: datetime | None,
                 running_at: datetime | None) -> int | None:
    """The whole seconds a flex-start VM of ``cluster`` had left of its run ``at`` (``flex_run_left_s``) when under
    ``deadlines.flex_end_margin_s``, at its end so far as Zen can tell (0 once past it); None otherwise."""
    left = flex_run_left_s(cluster.flex_start_run_s, at, first_heard, running_at, config.scaling.boot_estimate_s)
    return None if left is None or left >= config.deadlines.flex_end_margin_s else max(int(left), 0)


def told(config: ZenConfig, hb: Heartbeat, marks: Marks | None,
         decide: Callable[[Job, datetime], Decision]) -> Callable[[Job, datetime], Decision]:
    """``decide`` with each change saying ``hb.vm`` "was preempted" (``lifecycle.preempted_by_cloud``'s "VM ...", a
    gang's first node ``zen.core.gang``'s "node N (...)") saying how its flex-start run ended instead, where it did
    (``run_ended``). A gang's node keeps that word (``GangNode.run_ended``): the attempt's end, decided on another
    node's later report (its answer to the STOP, or its own end: ``zen.core.gang_ends.settle`` names the node preempted
    first), says it of that node too. Only the history's words: the STOP sent to a gang's other nodes still reads as
    a preemption's, which gives them ``ZEN_PREEMPTION_NOTICE`` (``zen.core.stops.preempts``)."""

    def decided(job: Job, now: datetime) -> Decision:
        decision = decide(job, now)
        why = None if marks is None else run_ended(config, job, hb, marks, now)
        if why is not None and (nodes := decision.fields.get("gang")):
            decision.fields["gang"] = [n.model_copy(update={"run_ended": why}) if n.vm == hb.vm else n for n in nodes]
        return _said(job, decision, {hb.vm: why} if why else {})
    return decided


def of_nodes(job: Job, decision: Decision | None) -> Decision | None:
    """``decision`` (the lost-job sweep's: a gang's node silent after another's flex-start run ended) with each change
    saying a node of ``job`` whose run ended (``GangNode.run_ended``) "was preempted" saying how it ended instead."""
    return None if decision is None else _said(job, decision, {})


def _said(job: Job, decision: Decision, ended: dict[str, str]) -> Decision:
    """``decision`` with what each VM of ``ended``, or node of ``job`` whose run ended, "was preempted" reworded."""
    ended = {n.vm: n.run_ended for n in job.gang or () if n.run_ended} | ended
    if ended:
        decision.changes = [Change(c.to, gave_back.reason(c.reason, dict(ended))) for c in decision.changes]
    return decision

