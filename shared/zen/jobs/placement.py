"""Where a request may run: its cluster, allowed regions (narrowed to the execution groups it requires, and
to those its data needs: ``zen.core.clearance``), attempt limit, run time cap and queue, and, when it lists
several acceptable GPU shapes, which one it gets (``choose``, once, at submission). ``resolve_request`` needs only the configuration, so
``zen submit`` applies it before publishing; it raises ``Rejected`` with the reason.

Tags: docs/how-to/data-placement.md; GPU shapes: docs/how-to/queues.md, "Several GPU shapes"; the
limits: docs/reference/messages.md, JobRequest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from zen.core.clearance import Clearance, data_uris, for_request, touches
from zen.core.config import ClusterConfig, QueueConfig, ZenConfig
from zen.core.errors import ConfigError, Rejected
from zen.core.gcs import output_room_problem
from zen.core.locality import order_by_data
from zen.core.models import Job, JobRequest
from zen.core.provisioning import accepted_models, blocked_for, pool_key
from zen.jobs.queueing import Queueing
from zen.jobs.authorization import check_notify, check_secrets

if TYPE_CHECKING:
    from zen.jobs.store import JobTx


@dataclass(frozen=True)
class Shape:
    cluster: str
    regions: list[str]
    gpus: int | None = None  # the GPUs a job holds on this shape's VMs (ClusterConfig.gpus_held); None: all


@dataclass(frozen=True)
class Resolved:
    cluster: str  # the first acceptable shape's (``choose`` may pick another of ``shapes``)
    regions: list[str]
    max_attempts: int
    queue: str | None  # None without ``queues:``
    max_runtime_s: int = 0  # the request's, else the configured cap (limits.max_runtime_s)
    shapes: list[Shape] = field(default_factory=list)  # every acceptable shape, preferred first
    # Set when its data (data_clearance) needs tags it did not ask for: the tags it runs with, and why.
    widened_tags: list[str] | None = None
    clearance: Clearance | None = None

    def stored(self, canonical: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """The canonical request as the job's row keeps it (with the tags its data needs), and, when they
        were added, the note its history records so that ``zen jobs history`` shows why."""
        if self.clearance is None:
            return canonical, None
        return ({**canonical, "requires_tags": self.widened_tags},
                f"requires_tags widened to {self.widened_tags}: {self.clearance.because()}")


def resolve_request(config: ZenConfig, request: JobRequest, job_id: str | None = None) -> Resolved:
    """The cluster, regions, attempt limit and queue of a valid request, or ``Rejected``. ``job_id``:
    the one it gets when the request names none (the message id)."""
    job_id = request.job_id or job_id
    if request.outputs is not None and job_id is not None:
        problem = output_room_problem(request.outputs, job_id, request.nodes)
        if problem:
            raise Rejected(problem)
    if request.checkpoint is not None and config.checkpoints.bucket is None:
        raise Rejected("checkpoint: this Zen saves no checkpoints (its configuration has no checkpoints.bucket)")
    uris = data_uris(request.model_dump(mode="json", include={"inputs", "outputs"}))
    if (kept := config.checkpoints.bucket) and (named := [u for u in uris if touches(u, f"gs://{kept}/")]):
        # Its agent stages and uploads with the account that keeps the cluster's checkpoints: another job's checkpoint,
        # named as data, would be read, or written over and restored into that job's next attempt.
        raise Rejected(f"{named[0]}: gs://{kept}/ is Zen's checkpoint bucket, which no job's inputs or outputs may "
                       "name (a job saves and restores its own checkpoint with checkpoint:)")
    max_attempts = request.max_attempts or config.attempts.default_max_attempts
    if max_attempts > config.attempts.max_max_attempts:
        raise Rejected(f"max_attempts {max_attempts} is above the limit {config.attempts.max_max_attempts}")
    if request.max_runtime_s is not None and request.max_runtime_s > config.limits.max_runtime_s:
        raise Rejected(f"max_runtime_s {request.max_runtime_s} is above the limit {config.limits.max_runtime_s}")
    max_runtime_s = config.limits.max_runtime_s if request.max_runtime_s is None else request.max_runtime_s
    if request.queue is not None and not config.queues:  # not dropped: it would run outside the quota meant for it
        raise Rejected(f"queue {request.queue!r}: this Zen has no queues (its configuration has no queues:); "
                       "submit without one")
    request, clearance, widened = _cleared(config, request)
    if request.gpu_types is None:
        cluster = _one_cluster(config, request)
        check_nodes(cluster, request)
        check_provisioning(cluster, request, max_runtime_s)
        regions = _tagged(cluster, _regions(cluster, request.regions), request.requires_tags, clearance)
        shapes = [Shape(cluster.name, order_by_data(config, regions, request.inputs))]
        queue = _queue(config, request, cluster)
    else:
        shapes, queue = _acceptable_shapes(config, request, max_runtime_s, clearance)
    check_secrets(config, request.secrets, queue)  # the queue's rule (zen.jobs.authorization)
    check_notify(config, request.notify, queue)  # the same rule for the URLs' secrets; email's (zen.core.notify)
    return Resolved(shapes[0].cluster, shapes[0].regions, max_attempts, queue, max_runtime_s, shapes,
                    request.requires_tags if widened else None, clearance if widened else None)


def _cleared(config: ZenConfig, request: JobRequest) -> tuple[JobRequest, Clearance | None, bool]:
    """The request with the tags its data needs (``zen.core.clearance``) added to its ``requires_tags``,
    whether or not it asked: widening is less surprising than refusing a job that merely did not know
    its data is bound; it is refused only where no allowed region carries them (``_tagged``). Returns
    the request, the clearance, and whether any tag was added."""
    clearance = for_request(config.data_clearance, request.model_dump(mode="json", include={"inputs", "outputs"}))
    if clearance is None or set(clearance.tags) <= set(request.requires_tags or ()):
        return request, clearance, False
    tags = sorted(set(request.requires_tags or ()) | set(clearance.tags))
    return request.model_copy(update={"requires_tags": tags}), clearance, True


def regions_cleared_now(config: ZenConfig, job: Job) -> list[str]:
    """The regions the configuration allows the job now, as its submission would have chosen them
    (its cluster's regions it asked for, with the tags it requires): the configuration may change while
    it waits, and the claim check (``zen.jobs.claims``) holds a claim to these."""
    cluster = config.cluster(job.cluster)
    if cluster is None:
        return []
    asked = job.request.get("regions")
    cleared = _carrying(cluster, [r for r in cluster.regions if asked is None or r in asked],
                        required_now(config, job))
    # In the job's own order first (its data's regions lead: zen.core.locality), then any cleared since.
    return [r for r in job.regions if r in cleared] + [r for r in cleared if r not in job.regions]


def gpus_short(config: ZenConfig, job: Job) -> str | None:
    """Why no VM of the job's cluster has the GPUs it asks now: its ``gpu_count`` (asked by shape), else those of
    its cluster's VM when it was accepted (it named the cluster: ``Job.gpus``, each node's), above the cluster's
    ``gpu_count`` lowered since. None when they fit, or its cluster is gone (said elsewhere). Such a VM would run
    it whole, with fewer GPUs than it asked (``zen.jobs.claims``)."""
    cluster = config.cluster(job.cluster)
    asked = job.request.get("gpu_count") or job.gpus // max(job.nodes, 1)
    if cluster is None or not asked or asked <= cluster.gpu_count:
        return None
    whose = "its gpu_count" if job.request.get("gpu_count") else "its cluster's VMs had when it was accepted"
    return (f"cluster {cluster.name}'s VMs have {cluster.gpu_count} GPUs now (gpu_count {cluster.gpu_count}), "
            f"and the job asks {asked} ({whose}): the configuration changed since it was accepted")


def required_now(config: ZenConfig, job: Job) -> list[str]:
    """The tags a VM must carry to run the job now: those it was stored with, and those its data needs
    under the configuration now (a binding added after it was stored, or a row written without them)."""
    clearance = for_request(config.data_clearance, job.request)
    return sorted(set(job.request.get("requires_tags") or ()) | set(clearance.tags if clearance else ()))


def check_provisioning(cluster: ClusterConfig, request: JobRequest, max_runtime_s: int) -> None:
    """``Rejected``, naming the field, unless ``cluster`` lists a model the job accepts that can meet its
    start bound. The rule: flex-start's resize requests are granted when capacity frees, so a job that
    accepts flex-start alone must allow at least the cluster's ``flex_start_min_wait_s`` (its own
    ``max_start_wait_s``, else the cluster's), and run no longer than a flex-start VM lives
    (``flex_start_run_s``); spot and standard meet any bound (past it Zen moves to a costlier model)."""
    models = accepted_models(request.provisioning, cluster.provisioning)
    if not models:
        raise Rejected(f"provisioning: cluster {cluster.name} does not use {request.provisioning} VMs "
                       f"(its models: {', '.join(cluster.provisioning)})")
    if models != ("flex-start",):
        return
    own = request.max_start_wait_s is not None
    wait = request.max_start_wait_s if request.max_start_wait_s is not None else cluster.max_start_wait_s
    if wait < cluster.flex_start_min_wait_s:
        raise Rejected(f"max_start_wait_s: {wait} s{'' if own else f' (cluster {cluster.name} default)'} is below "
                       f"the {cluster.flex_start_min_wait_s} s flex-start needs at least in cluster {cluster.name} "
                       "(flex_start_min_wait_s), and flex-start is the only model the job accepts: allow longer, "
                       "or accept another model (provisioning)")
    if max_runtime_s > cluster.flex_start_run_s:
        given = "" if request.max_runtime_s is not None else " (none given: the limit, limits.max_runtime_s)"
        raise Rejected(f"max_runtime_s: {max_runtime_s} s{given} is above how long a flex-start VM of cluster "
                       f"{cluster.name} runs ({cluster.flex_start_run_s} s, flex_start_run_s), and flex-start is the "
                       f"only model the job accepts (provisioning): give max_runtime_s of at most "
                       f"{cluster.flex_start_run_s}, or accept another model")


def check_nodes(cluster: ClusterConfig, request: JobRequest) -> None:
    """``Rejected``, naming ``nodes``, unless ``cluster`` can hold the whole gang in one region at once:
    every node is a VM of its own (a cluster whose VMs run several jobs at once is refused: a gang holds
    whole VMs, and its nodes would share theirs with strangers' jobs), and the gang never spans regions,
    so it must fit the cluster's ``max_vms`` and one regional MIG's ``max_vms_per_region``."""
    if (problem := cluster.nodes_problem(request.nodes)) is not None:
        raise Rejected(problem)


def _one_cluster(config: ZenConfig, request: JobRequest) -> ClusterConfig:
    if request.cluster is not None:
        cluster = config.cluster(request.cluster)
        if cluster is None:
            known = ", ".join(c.name for c in config.clusters)
            raise Rejected(f"unknown cluster {request.cluster!r}; known clusters: {known}")
        return cluster
    if request.gpu_type is None or request.gpu_count is None:  # JobRequest's own check refuses this
        raise Rejected("give a cluster, or gpu_count with gpu_type (or gpu_types)")
    cluster = config.smallest_fitting_cluster(request.gpu_type, request.gpu_count)
    if cluster is None:
        raise Rejected(f"no cluster has {request.gpu_count} or more {request.gpu_type} GPUs per VM; "
                       f"offered: {_offered(config)}")
    return cluster


def _regions(cluster: ClusterConfig, allowed: list[str] | None) -> list[str]:
    if allowed is None:
        return list(cluster.regions)
    outside = [r for r in allowed if r not in cluster.regions]
    if outside:
        raise Rejected(f"regions {outside} are not used by cluster {cluster.name} (its regions: {cluster.regions})")
    return [r for r in cluster.regions if r in allowed]


def _carrying(cluster: ClusterConfig, regions: list[str], required: list[str] | None) -> list[str]:
    """Those of ``regions`` whose VMs carry every tag in ``required``."""
    return [r for r in regions if set(required or ()) <= set(cluster.tags_of(r))]


def _tagged(cluster: ClusterConfig, regions: list[str], required: list[str] | None,
            clearance: Clearance | None = None) -> list[str]:
    """The regions whose VMs carry every tag in ``required`` (execution groups), or ``Rejected``
    (naming the bound data when ``clearance`` added tags)."""
    if not required:
        return regions
    cleared = _carrying(cluster, regions, required)
    if not cleared:
        groups = "; ".join(f"{r}: {', '.join(cluster.tags_of(r)) or 'none'}" for r in regions)
        why = f": {clearance.because()}; run it where those tags are" if clearance else ""
        raise Rejected(f"no allowed region of cluster {cluster.name} carries the tags {sorted(required)} "
                       f"(tags by region: {groups}){why}")
    return cleared


def held_gpus(cluster: ClusterConfig, request: JobRequest) -> int:
    """The GPUs a job of ``request`` holds on ``cluster`` while admitted: its share of a VM (``gpus_held``),
    on each of its nodes (a gang holds every node's GPUs)."""
    return cluster.gpus_held(request.gpu_count) * request.nodes


def _queue(config: ZenConfig, request: JobRequest, cluster: ClusterConfig) -> str | None:
    if not config.queues:  # (a queue named without them is refused once, by resolve_request)
        return None
    return Queueing(config).resolve(request.queue, request.user_id, cluster.name, held_gpus(cluster, request)).name


def _acceptable_shapes(config: ZenConfig, request: JobRequest, max_runtime_s: int,
                       clearance: Clearance | None = None) -> tuple[list[Shape], str | None]:
    if request.gpu_types is None or request.gpu_count is None:  # JobRequest's own check refuses this
        raise Rejected("give a cluster, or gpu_count with gpu_type (or gpu_types)")
    shapes: list[Shape] = []
    why_not: list[str] = []
    queue: str | None = None
    for gpu_type in dict.fromkeys(request.gpu_types):
        cluster = config.smallest_fitting_cluster(gpu_type, request.gpu_count)
        if cluster is None:
            why_not.append(f"{gpu_type}: no cluster has {request.gpu_count} or more per VM")
            continue
        if any(s.cluster == cluster.name for s in shapes):
            continue
        regions = [r for r in cluster.regions if request.regions is None or r in request.regions]
        if not regions:
            why_not.append(f"{gpu_type}: cluster {cluster.name} has none of the regions {request.regions}")
            continue
        try:
            check_nodes(cluster, request)
            check_provisioning(cluster, request, max_runtime_s)
            regions = order_by_data(config, _tagged(cluster, regions, request.requires_tags, clearance),
                                    request.inputs)
            queue = _queue(config, request, cluster)
        except Rejected as rejection:
            why_not.append(f"{gpu_type}: {rejection.reason}")
            continue
        shapes.append(Shape(cluster.name, regions, held_gpus(cluster, request)))
    if not shapes:
        raise Rejected(f"none of the GPU types can take the job ({'; '.join(why_not)}); offered: {_offered(config)}")
    clusters = [configured_cluster(config, shape.cluster) for shape in shapes]
    outside = [r for r in request.regions or [] if not any(r in cluster.regions for cluster in clusters)]
    if outside:  # as with one cluster (_regions): a typo is reported, not dropped
        used = "; ".join(f"{cluster.name}: {cluster.regions}" for cluster in clusters)
        raise Rejected(f"regions {outside} are not used by the clusters of the acceptable GPU shapes "
                       f"(their regions: {used})")
    return shapes, queue


def _offered(config: ZenConfig) -> str:
    return ", ".join(f"{c.gpu_count}x {c.gpu_type}" for c in config.clusters)


def choose(tx: JobTx, config: ZenConfig, resolved: Resolved, now: datetime, accepts: str | None = None,
           longest: int | None = None) -> tuple[Shape, str | None]:
    """Of several acceptable shapes, the first with quota free now and a region where a stockout blocks not every
    pool of the models the job accepts (``accepts``: its request's ``provisioning``; ``longest``: the
    ``max_runtime_s`` it named, past a flex-start VM's run no flex-start pool); else the first. Returns the
    shape and, when there was a choice, why it was taken."""
    if len(resolved.shapes) == 1:
        return resolved.shapes[0], None
    skipped = []
    for shape in resolved.shapes:
        if resolved.queue is not None:
            full = Queueing(config).no_room(tx, configured_queue(config, resolved.queue), shape.cluster,
                                            shape.gpus or configured_cluster(config, shape.cluster).gpu_count)
            if full:
                skipped.append(f"{shape.cluster}: {full}")
                continue
        cluster = configured_cluster(config, shape.cluster)  # each pool it may use blocked (by model)
        if blocked_for(shape.regions, accepts, cluster.provisioning, tx.blocked_regions(shape.cluster, now), longest,
                       cluster.flex_start_run_s) >= set(shape.regions):
            skipped.append(f"{shape.cluster}: every allowed region is stocked out")
            continue
        return shape, f"GPU shape {shape.cluster}" + (f" ({'; '.join(skipped)})" if skipped else "")
    first = resolved.shapes[0]
    return first, f"GPU shape {first.cluster}, the first: none had room ({'; '.join(skipped)})"


def configured_cluster(config: ZenConfig, name: str) -> ClusterConfig:
    """The cluster ``name`` that a resolved request names (so the configuration has it)."""
    cluster = config.cluster(name)
    if cluster is None:
        raise ConfigError(f"cluster {name!r} is not in the configuration")
    return cluster


def configured_queue(config: ZenConfig, name: str) -> QueueConfig:
    """The queue ``name`` that a resolved request names (so the configuration has it)."""
    queue = config.queue(name)
    if queue is None:
        raise ConfigError(f"queue {name!r} is not in the configuration")
    return queue


def job_pools(config: ZenConfig, job: Job) -> tuple[str, ...]:
    """The pools a created job may start in (its regions x the models it accepts): what a spare VM must be in to
    cover it (``zen.scaling.coverage``)."""
    cluster = config.cluster(job.cluster)
    if cluster is None:
        return tuple(job.regions)
    models = accepted_models(job.request.get("provisioning"), cluster.provisioning)
    return tuple(pool_key(r, m, cluster.provisioning[0]) for r in job.regions for m in models)
