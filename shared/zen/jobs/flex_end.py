"""The end of a flex-start VM's run, as a job's history tells it.

GCE deletes a flex-start VM ``flex_start_run_s`` after it is RUNNING, whatever it runs; its agent, shut down, reports
its attempts PREEMPTED, and Zen reruns them free, as a spot VM's preemption (``zen.core.lifecycle.preempted_by_cloud``).
The attempt's end said "VM ... was preempted": untrue of a flex-start VM, which no one preempts, and its user took
the job for one run on a spot VM. A PREEMPTED from a flex-start VM with less than ``deadlines.flex_end_margin_s``
of its run left by Zen's count (``zen.core.provisioning.flex_run_left_s``: counted from when a scaling pass first
saw it RUNNING, a pass's interval late at most, or from its agent's first word less the boot estimate) says it
reached the end of its run instead; one from a flex-start VM with more left still reads as preempted.
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from zen.core.config import ZenConfig
from zen.core.lifecycle import Change, Decision
from zen.core.models import AgentStatus, Heartbeat, Job
from zen.core.provisioning import flex_run_left_s
from zen.jobs.store import JobStore

Marks = tuple[datetime | None, datetime | None]  # the VM's first word and first seen RUNNING (JobTx.vm_run_marks)


def run_marks(store: JobStore, hb: Heartbeat) -> Marks | None:
    """The run marks of the VM reporting ``hb`` when it reports an attempt PREEMPTED; None for any other report
    (read before the report's transaction: both are written once, and only this report needs them)."""
    if hb.status is not AgentStatus.PREEMPTED:
        return None
    with store.session() as tx:
        return tx.vm_run_marks(hb.vm)


def run_ended(config: ZenConfig, job: Job, hb: Heartbeat, marks: Marks | None, now: datetime) -> str | None:
    """What to say of ``hb.vm`` instead of "was preempted": it is a flex-start VM of the job's cluster whose run has
    less than ``deadlines.flex_end_margin_s`` left ``now`` (``marks``: ``run_marks``); None for any other VM."""
    cluster = config.cluster(job.cluster)
    if marks is None or cluster is None or cluster.model_of(hb.vm, hb.region) != "flex-start":
        return None
    left = flex_run_left_s(cluster.flex_start_run_s, now, *marks, config.scaling.boot_estimate_s)
    if left is None or left >= config.deadlines.flex_end_margin_s:
        return None
    return (f"reached the end of its flex-start run (flex_start_run_s {cluster.flex_start_run_s}, about "
            f"{max(int(left), 0)} s left by Zen's count)")


def told(config: ZenConfig, hb: Heartbeat, marks: Marks | None,
         decide: Callable[[Job, datetime], Decision]) -> Callable[[Job, datetime], Decision]:
    """``decide`` with each change saying ``hb.vm`` "was preempted" (``lifecycle.preempted_by_cloud``'s "VM ...", a
    gang's first node ``zen.core.gang``'s "node N (...)") saying how its flex-start run ended instead, where it did
    (``run_ended``). Only the history's words: the STOP sent to a gang's other nodes still reads as a preemption's,
    which gives them ``ZEN_PREEMPTION_NOTICE`` (``zen.core.stops.preempts``)."""
    said = (f"VM {hb.vm} was preempted", f"({hb.vm}) was preempted")

    def decided(job: Job, now: datetime) -> Decision:
        decision = decide(job, now)
        if not any(words in change.reason for change in decision.changes for words in said) or (
                why := run_ended(config, job, hb, marks, now)) is None:
            return decision
        decision.changes = [Change(c.to, c.reason.replace(said[0], f"VM {hb.vm} {why}").replace(
            said[1], f"({hb.vm}) {why}")) for c in decision.changes]
        return decision
    return decided
