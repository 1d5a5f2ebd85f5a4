"""A silent attempt whose VM the cloud took, as the lost-job sweep counts it.

An attempt whose VM is silent past ``heartbeat_timeout_s`` spends one of its job's attempts
(``zen.core.lifecycle.decide_silence``): silence may be the job's doing (its agent killed, its VM wedged). One whose
agent reports PREEMPTED is requeued without spending one (``lifecycle.preempted_by_cloud``). But a spot VM's notice
is 30 s, and its agent's report may go down with it; a flex-start VM is deleted at its run's end, whatever runs on it:
such attempts spent one, and a job of ``max_attempts`` 1 to 3 FAILED after a few preemptions it had no part in.

The sweep asks what the scaling passes saw of the VM (``JobTx.vm_stop_seen``): a pass after the attempt's last
report listed it stopped (neither RUNNING nor STOPPING: GCE bills it no more), or saw it leave its MIG, and Zen did
not delete it (Zen deletes only VMs it drained, and drains none that holds a job). A spot VM so stopped was preempted,
or its guest was shut down, which its agent reports PREEMPTED too when the report gets out: ``FREE_PREEMPTIONS``
bounds both alike. A flex-start VM so stopped or gone, its run within ``deadlines.flex_end_margin_s`` of its end by
Zen's count at its last report (``zen.core.provisioning.flex_run_left_s``), reached its run's end. Either attempt is
counted as a PREEMPTED report's is, its history saying why. Only the count and the words change: the STOP sent to
the VM (alive but cut off, it must not run on) and when the attempt ends are the silence's. A VM still RUNNING, a
standard VM, a VM no pass has seen stop yet, and a gang's nodes (``zen.core.gang``) spend an attempt as before.
"""

from __future__ import annotations

from datetime import datetime

from zen.core.config import ZenConfig
from zen.core.lifecycle import Change, Decision, preempted_by_cloud
from zen.core.models import Job, JobStatus
from zen.jobs.flex_end import near_run_end
from zen.jobs.store import JobTx


def taken(config: ZenConfig, tx: JobTx, job: Job, decision: Decision | None, now: datetime) -> Decision | None:
    """``decision`` (the sweep's for ``job``) counted as ``preempted_by_cloud`` counts it where the scaling passes
    saw the cloud take the job's VM (``taken_because``); else ``decision`` as it is."""
    if (decision is None or job.nodes > 1 or job.vm is None or job.last_heartbeat_at is None
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


def taken_because(config: ZenConfig, job: Job, seen: tuple[str | None, datetime | None, bool] | None) -> str | None:
    """Why ``job``'s silent VM is the cloud's doing, seen stopped (``seen``: ``JobTx.vm_stop_seen``); None: it is not
    known to be (not seen stopped, a standard VM, or a flex-start VM whose run was not near its end)."""
    cluster = config.cluster(job.cluster)
    if seen is None or cluster is None or job.last_heartbeat_at is None:
        return None
    model, running_at, left = seen
    model = model or cluster.model_of(job.vm or "", job.region or "")
    how = "left its MIG" if left else "stopped"
    if model == "spot":
        return f"a scaling pass saw its spot VM {how} since, not deleted by Zen: taken as preempted"
    if model != "flex-start":
        return None
    if (run_left := near_run_end(config, cluster, job.last_heartbeat_at, None, running_at)) is None:
        return None
    return (f"a scaling pass saw its flex-start VM {how} since, about {run_left} s of its run left by "
            f"Zen's count when last heard (flex_start_run_s {cluster.flex_start_run_s}): taken as its run's end")
