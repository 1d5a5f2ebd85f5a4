"""Where a job's start message goes first (issue 15: data locality, warm caches).

``first_route``: each time a job is queued for an attempt, its start is offered to the idle VMs whose
warm cache holds its inputs or image (``start_vms``, at most ``MAX_OFFERS``), else sent to the allowed
regions nearest its data (``start_regions``), for ``deadlines.data_wait_s``. ``next_route``: the scale
tick then widens it, to those regions and its data's, then to every allowed region. No I/O: the caller
passes what the fleet holds (``blocked``, ``holding``).
How, why and the timings: docs/how-to/data-placement.md (Routing by data, Warm caches).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

from zen.core.config import ZenConfig
from zen.core.locality import nearest_regions
from zen.core.models import InputSpec, Job
from zen.core.provisioning import accepted_models, blocked_for, only_model


MAX_OFFERS = 3  # warm VMs a start is offered to at once


@dataclass(frozen=True)
class Route:
    start_regions: list[str] | None  # the regions the start reaches; None: every allowed region
    widen_at: datetime | None  # when the tick widens it (None: not narrowed)
    note: str | None = None  # for the job's history: where the start went and why
    start_vms: list[str] | None = None  # the warm VMs it is offered to alone (then start_regions: theirs)

    def fields(self) -> dict[str, Any]:
        return {"start_regions": self.start_regions, "widen_at": self.widen_at, "start_vms": self.start_vms}


EVERYWHERE = Route(None, None)


def _near(config: ZenConfig, job: Job) -> list[str]:
    inputs = [InputSpec.model_validate(spec) for spec in job.request.get("inputs") or ()]
    return nearest_regions(config, job.regions, inputs)


def warm_keys(job: Job) -> tuple[list[str], str | None]:
    """What a VM's warm cache must hold for the job: its input URIs, and its image when given by digest
    (a tag may move; a digest pins what is cached). ([], None): nothing to look for."""
    image = job.request.get("image")
    return [spec["uri"] for spec in job.request.get("inputs") or ()], image if image and "@sha256:" in image else None


def first_route(config: ZenConfig, job: Job, now: datetime, blocked: Callable[[], set[str]],
                holding: Callable[[], list[tuple[str, str, bool, str | None]]]) -> Route:
    """Where a new attempt's start goes first, for ``data_wait_s``. Warm first (``holding()``: idle VMs
    whose cache holds its inputs or image, as (VM, region, offered another job's start already, the model a scaling
    pass recorded for it), those of a model the job accepts (``_accepts``), those
    free first; read only when the job has either): offered to the free ones, else sent to the regions
    of those offered other jobs already (a burst on the same data waits on no VM, and stays where the
    caches are). Else the regions nearest its data, less those where a stockout blocks every pool it may use now
    (``blocked()``: blocked pools, read only for a data job): the job would only wait there. Else (or with ``data_wait_s`` 0) everywhere."""
    wait = config.deadlines.data_wait_s
    if not wait:
        return EVERYWHERE
    inputs, image = warm_keys(job)
    warm = [vm for vm in (holding() if inputs or image else ())
            if vm[1] in job.regions and _accepts(config, job, vm[0], vm[1], vm[3])]
    free = [(name, region) for name, region, offered, _ in warm if not offered][:MAX_OFFERS]
    regions = [r for r in job.regions if any(vm[1] == r for vm in (free or warm))]
    if free:
        vms = [name for name, _ in free]
        why = ("whose warm cache holds its inputs or which ran its image" if inputs and image else
               "whose warm cache holds its inputs" if inputs else "which ran its image")
        return Route(regions, now + timedelta(seconds=wait),
                     f"start offered to {_vms(vms)} in {', '.join(regions)} first, {why}; widened after {wait:g} s "
                     "unclaimed", start_vms=vms)
    if warm and len(regions) < len(job.regions):  # its warm VMs are offered other jobs' starts now
        why = "whose idle VMs hold its inputs" if inputs else "whose idle VMs have its image"
        return Route(regions, now + timedelta(seconds=wait),
                     f"start sent to {', '.join(regions)} first, {why}; widened after {wait:g} s unclaimed")
    near = _near(config, job)
    if near and (cluster := config.cluster(job.cluster)) is not None:  # a region where each pool it may use is blocked
        stocked_out = blocked_for(near, job.request.get("provisioning"), cluster.provisioning, blocked(),
                                  job.request.get("max_runtime_s"), cluster.flex_start_run_s)
        near = [r for r in near if r not in stocked_out]
    if not near:
        return EVERYWHERE
    return Route(near, now + timedelta(seconds=wait),
                 f"start sent to {', '.join(near)} first, where its data is; widened after {wait:g} s unclaimed")


def _accepts(config: ZenConfig, job: Job, vm: str, region: str, recorded: str | None) -> bool:
    """Whether ``vm`` runs as a provisioning model the job accepts: the one a scaling pass ``recorded`` for it, else
    the one its name tells (its pool's MIG; a name that tells none, yes), as its claim is checked
    (``zen.jobs.claims._unaccepted_model``): a warm VM of another model would refuse its claim, and the start wait
    on that round trip (a primary MIG's spot VM after its cluster's models were narrowed to standard: its name
    tells standard, and a standard-only job's start, offered to it alone, waited there ``data_wait_s``). A job that
    names no model (or ``any``) accepts the VM's whatever it is, one its cluster no longer lists too."""
    cluster, accepts = config.cluster(job.cluster), job.request.get("provisioning")
    if cluster is None or only_model(accepts) is None:
        return True
    model = recorded or cluster.model_of(vm, region)
    return model is None or model in accepted_models(accepts, cluster.provisioning)


def next_route(config: ZenConfig, job: Job, now: datetime) -> Route:
    """A narrowed start whose wait is over, with the note for its history: from warm VMs to their
    regions and its data's (for another ``data_wait_s``) unless those are every allowed region; from
    regions to its data's as well when those add regions; else to every allowed region (so is a start offered
    to a VM alone, ahead of a lower-priority job it claimed: ``zen.jobs.claims.outranked``)."""
    waited = (now - (job.start_published_at or job.queued_at or now)).total_seconds()
    where = f"on {_vms(job.start_vms)}" if job.start_vms else f"in {', '.join(job.start_regions or ())}"
    near = _near(config, job)
    grown = [r for r in job.regions if r in (job.start_regions or ()) or r in near]
    if job.start_vms and job.start_regions and len(grown) < len(job.regions):  # (none: a VM's, ahead of priorities)
        data = " and its data" if any(r not in (job.start_regions or ()) for r in grown) else ""
        return Route(grown, now + timedelta(seconds=config.deadlines.data_wait_s),
                     f"start widened to {', '.join(grown)}, where its warm VMs{data} are: unclaimed {waited:.0f} s "
                     f"{where}")
    # Sent to regions of warm VMs first: its data's regions next. Sent to its data's regions already
    # (less those a stockout blocked then): every region, not the blocked one for another wait.
    if (not job.start_vms and not set(job.start_regions or ()) <= set(near)
            and len(job.start_regions or ()) < len(grown) < len(job.regions)):
        return Route(grown, now + timedelta(seconds=config.deadlines.data_wait_s),
                     f"start widened to {', '.join(grown)}, where its data is: unclaimed {waited:.0f} s {where}")
    return Route(None, None, f"start widened to every allowed region: unclaimed {waited:.0f} s {where}")


def _vms(vms: list[str]) -> str:
    return f"VM{'s' if len(vms) > 1 else ''} {', '.join(vms)}"
