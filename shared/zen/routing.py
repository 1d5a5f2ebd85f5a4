"""Where a job's start message goes first (issue 15: data locality, warm caches).

A job's ``regions`` are where it may run; its start message reaches the start subscriptions of its
``start_regions`` while they are set, else of every allowed region (``zen.announce.start_attributes``).
Each time a job is queued for an attempt (admitted, or requeued after a lost attempt), ``first_route``
narrows its start to the allowed regions nearest its inputs (``zen.locality.nearest_regions``: inputs of
a known location weighing at least ``data.route_min_gb``) for ``deadlines.data_wait_s`` (0: never
narrowed). Meanwhile an idle VM elsewhere does not take a data-heavy job that a VM near its data may
take, and the planner scales only near the data (its demand groups by the regions a start reaches:
``queued_demand``). The scale tick then widens each narrowed job whose wait is over (``next_route``):
its start is published again to every allowed region, and its history says so.

- The claim check accepts a claim from any allowed region, narrowed or not (``lifecycle.decide_heartbeat``):
  once widened, any allowed VM may take it; the narrow copy still in the data region's subscription
  only loses the claim race (RELEASE), as every duplicate start does.
- A start republished for the same attempt (unclaimed for ``start_republish_s``, a refused claim) keeps
  the attempt's routing; a new attempt is routed afresh.
- Warm caches (``zen.agent.cache``): an idle VM whose cache holds all of a job's inputs (or its image,
  when given by digest) is better still: the start goes first to those VMs' regions, then (widened)
  to its data's regions as well, then to every allowed region, ``data_wait_s`` each.
- A region a stockout blocks (the planner's memory: ``fleet.blocked_regions``) is left out of the
  narrowing: the job would only wait there for the widening (measured on the simulator's
  ``data-locality`` scenario: README, Simulator and benchmark).
- Tags: a tagged job's regions are already its cleared regions, so narrowing and widening stay among them.
- The tick runs every 60 s in production (Cloud Scheduler), so a narrowed start is widened between
  ``data_wait_s`` and ``data_wait_s`` + 60 s after it went out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

from zen.config import ZenConfig
from zen.locality import nearest_regions
from zen.models import InputSpec, Job


@dataclass(frozen=True)
class Route:
    start_regions: list[str] | None  # the regions the start reaches; None: every allowed region
    widen_at: datetime | None  # when the tick widens it (None: not narrowed)
    note: str | None = None  # for the job's history: where the start went and why

    def fields(self) -> dict[str, Any]:
        return {"start_regions": self.start_regions, "widen_at": self.widen_at}


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
                holding: Callable[[], set[str]]) -> Route:
    """Where a new attempt's start goes first, for ``data_wait_s``: the regions of idle VMs whose warm
    cache holds its inputs or image (``holding()``, read only when it has either), else the regions
    nearest its data, less those a stockout blocks now (``blocked()``, read only for a data job): the
    job would only wait there. Else (or with ``data_wait_s`` 0) everywhere."""
    wait = config.deadlines.data_wait_s
    if not wait:
        return EVERYWHERE
    inputs, image = warm_keys(job)
    held = holding() if inputs or image else set()
    warm = [r for r in job.regions if r in held]
    if warm and len(warm) < len(job.regions):
        why = "whose idle VMs hold its inputs" if inputs else "whose idle VMs have its image"
        return Route(warm, now + timedelta(seconds=wait),
                     f"start sent to {', '.join(warm)} first, {why}; widened after {wait:g} s unclaimed")
    near = _near(config, job)
    if near:
        stocked_out = blocked()
        near = [r for r in near if r not in stocked_out]
    if not near:
        return EVERYWHERE
    return Route(near, now + timedelta(seconds=wait),
                 f"start sent to {', '.join(near)} first, where its data is; widened after {wait:g} s unclaimed")


def next_route(config: ZenConfig, job: Job, now: datetime) -> Route:
    """A narrowed start whose wait is over: from warm VMs' regions to its data's as well (for another
    ``data_wait_s``) when those add regions, else to every allowed region; with the note for its history."""
    waited = (now - (job.start_published_at or job.queued_at or now)).total_seconds()
    where = ", ".join(job.start_regions or ())
    grown = [r for r in job.regions if r in (job.start_regions or ()) or r in _near(config, job)]
    if len(job.start_regions or ()) < len(grown) < len(job.regions):
        return Route(grown, now + timedelta(seconds=config.deadlines.data_wait_s),
                     f"start widened to {', '.join(grown)}, where its data is: unclaimed {waited:.0f} s in {where}")
    return Route(None, None, f"start widened to every allowed region: unclaimed {waited:.0f} s in {where}")
