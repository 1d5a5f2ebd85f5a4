"""Queued jobs nothing configured can run now (the configuration changed while they waited): why (``stranded``,
``unserved``), how the scale tick finds them before its scaling pass (``queued_candidates``), and the hold that keeps
them PENDING, no VM asked for them, until the configuration serves them again or their user stops them (``held``,
``kept_held``; looked at again every ``UNCLEARED_RECHECK_S`` by ``zen.jobs.sweeps.Sweeps.retry_due``). Such a job is
never failed: the change may be undone, or reach the functions before terraform made the new MIGs
(docs/how-to/operate.md, Changing a cluster)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from zen.core.clearance import for_request
from zen.core.config import ClusterConfig, ZenConfig
from zen.core.lifecycle import Change, Decision
from zen.core.models import Job, JobStatus
from zen.core.provisioning import MODELS, accepted_models, only_model, outlasts_flex
from zen.jobs.placement import gpus_short, regions_cleared_now, required_now

if TYPE_CHECKING:
    from zen.jobs.store import JobTx

UNCLEARED_HOLD = "no region of its may run it now: "  # a job's hold while nothing configured may run it (``held``)
UNCLEARED_RECHECK_S = 300.0  # how often such a job is looked at again (``zen.jobs.sweeps.Sweeps.retry_due``)
CHANGED = "the configuration changed since it was accepted"


def stranded(config: ZenConfig, job: Job) -> str | None:
    """Why no VM of the configuration can take the job, whatever its tags: its cluster gone, the one provisioning
    model it accepts gone from its cluster (or, flex-start, a run shorter than its ``max_runtime_s``), a gang above
    its cluster's ``max_vms`` or ``max_vms_per_region`` lowered since, more GPUs of a VM than its VMs have now, or every
    region it asked for gone from its cluster. None when one can (a job that named no regions runs in those its
    cluster has now: ``zen.jobs.claims.recleared`` widens it there). Each names the change and what the job asks."""
    cluster = config.cluster(job.cluster)
    if cluster is None:
        return f"cluster {job.cluster}, the job's, is not in the configuration ({CHANGED})"
    accepts = job.request.get("provisioning")
    models = accepted_models(accepts, cluster.provisioning)
    if not models:
        return (f"cluster {cluster.name} no longer lists {accepts}, the one provisioning model the job accepts "
                f"(the cluster's: {', '.join(cluster.provisioning)})")
    named = job.request.get("max_runtime_s")  # as claims and demand read it: not the cluster's default
    if models == ("flex-start",) and outlasts_flex(named, cluster.flex_start_run_s):
        return (f"its max_runtime_s ({named} s) is now above how long a flex-start VM of cluster "
                f"{cluster.name} runs (flex_start_run_s {cluster.flex_start_run_s} s), the one model it accepts")
    if (too_many := cluster.nodes_problem(job.nodes)) is not None:
        return f"{too_many} ({CHANGED})"
    if (short := gpus_short(config, job)) is not None:
        return short
    asked = job.request.get("regions")
    if asked is not None and not set(asked) & set(cluster.regions):
        return (f"cluster {cluster.name} no longer runs in {', '.join(asked)}, the regions the job allows "
                f"(the cluster's: {', '.join(cluster.regions)})")
    return None


def unserved(config: ZenConfig, job: Job) -> str | None:
    """Why nothing configured can run the job now: ``stranded``, else no region it may use carries the tags it
    requires (or its data needs) now. None when a region can."""
    if (why := stranded(config, job)) is not None:
        return why
    return None if regions_cleared_now(config, job) else why_not_cleared(config, job, job.regions)


def why_not_cleared(config: ZenConfig, job: Job, regions: list[str]) -> str:
    """Why the configuration no longer lets ``job`` run in ``regions`` (a claiming VM's, or those the tick drops)."""
    required = required_now(config, job)
    clearance = for_request(config.data_clearance, job.request)
    data = f"; {clearance.because()}" if clearance else ""
    one = len(regions) == 1
    named, carry = (f"region {regions[0]}", "carries") if one else (f"regions {', '.join(regions)}", "carry")
    if required:
        return f"{named} no longer {carry} the tags {required} the job requires{data} (the configuration changed)"
    if config.cluster(job.cluster) is None:
        return f"cluster {job.cluster} is no longer in the configuration"
    return f"cluster {job.cluster} no longer uses {named} (the configuration changed)"


def hold_of(why: str) -> str:
    """The hold of a job nothing configured can run now because ``why``."""
    return (f"{UNCLEARED_HOLD}{why}; it waits until the configuration has one again (looked at every "
            f"{UNCLEARED_RECHECK_S:g} s), or its user stops it")


def held(why: str, now: datetime) -> Decision:
    """The job back to PENDING, held (``UNCLEARED_HOLD``) because ``why``, its start routing forgotten."""
    hold = hold_of(why)
    return Decision(changes=[Change(JobStatus.PENDING, hold)], fields=dict(
        hold=hold, hold_until=now + timedelta(seconds=UNCLEARED_RECHECK_S), start_regions=None, start_vms=None,
        widen_at=None))


def kept_held(job: Job, why: str, now: datetime) -> Decision:
    """A held job nothing configured can run still (``why``): looked at again ``UNCLEARED_RECHECK_S`` later, nothing
    told; its hold rewritten, and its history told, where the reason changed (another change of the configuration)."""
    later: dict[str, object] = {"hold_until": now + timedelta(seconds=UNCLEARED_RECHECK_S)}
    if (hold := hold_of(why)) == job.hold:
        return Decision(fields=later)
    return Decision(fields={**later, "hold": hold}, note=f"still held, now because {why}")


def gone_models(cluster: ClusterConfig) -> list[str]:
    """The provisioning models a job may accept alone that ``cluster`` does not list (such a job it cannot run)."""
    return [m for m in MODELS if only_model(m) is not None and m not in cluster.provisioning]


def most_nodes(cluster: ClusterConfig) -> int:
    """The most nodes of a multi-node job ``cluster`` can hold (``ClusterConfig.nodes_problem``)."""
    return 1 if cluster.max_jobs_per_vm > 1 else min(cluster.max_vms, cluster.max_vms_per_region)


def queued_candidates(tx: JobTx, config: ZenConfig, limit: int) -> list[str]:
    """The QUEUED jobs (no gang node claimed) the configuration may no longer serve, beyond the tags and GPUs
    ``Sweeps.narrow_uncleared`` looks for: of a cluster not configured; of one whose models, flex-start run (a job
    accepting any model too, where flex-start is its only one), node limits or regions no longer fit what they ask
    (``stranded``). Each query reads no job while all fit."""
    found = tx.queued_jobs_of_other_clusters([c.name for c in config.clusters], limit)
    for cluster in config.clusters:
        flex_alone = list(cluster.provisioning) == ["flex-start"]  # a job accepting any model runs on flex-start alone
        found += [j for j in tx.queued_jobs_unfit(cluster.name, gone_models(cluster), cluster.flex_start_run_s,
                                                  most_nodes(cluster), list(cluster.regions), limit, flex_alone)
                  if j not in found]
    return found
